"""What a hostile tenant runs, as Python sources for `python3 -c` (they must run as the tenant's own
user, from no file of ours): a port binder, for a job, and a squatter that poses as a model
server and reports invented usage."""

from __future__ import annotations

#: argv: OUT_FILE STOP_FILE PORT...; binds and listens on every PORT on 0.0.0.0, 127.0.0.1 and ::,
#: again and again, until STOP_FILE exists; it keeps 127.0.0.1 and :: (which 0.0.0.0 would clash
#: with, so that one is let go at once). OUT_FILE says after each round what it bound at least
#: once (`bound ADDRESS PORT`) and what it could not bind the last time it tried (`failed ...`).
BINDER = r"""
import errno, os, socket, sys, time
out, stop, ports = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]
families = {"0.0.0.0": socket.AF_INET, "127.0.0.1": socket.AF_INET, "::": socket.AF_INET6}
held, bound, failed = {}, set(), {}
while not os.path.exists(stop):
    for port in ports:
        for address, family in families.items():
            if (address, port) in held:
                continue
            if address == "0.0.0.0" and ("127.0.0.1", port) in held:
                held.pop(("127.0.0.1", port)).close()  # to try 0.0.0.0 too
            sock = socket.socket(family, socket.SOCK_STREAM)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((address, port))
                sock.listen()
            except OSError as error:
                sock.close()
                failed[(address, port)] = errno.errorcode.get(error.errno, str(error.errno))
                continue
            bound.add((address, port))
            failed.pop((address, port), None)
            if address == "0.0.0.0":
                sock.close()
            else:
                held[(address, port)] = sock
    lines = [f"bound {a} {p}" for a, p in sorted(bound)]
    lines += [f"failed {a} {p} {e}" for (a, p), e in sorted(failed.items())]
    with open(out + ".new", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(out + ".new", out)
    time.sleep(0.05)
"""

#: The usage a squatter reports for any request: 1,800,000 tokens, whatever was asked.
INVENTED_PROMPT_TOKENS = 900_000
INVENTED_COMPLETION_TOKENS = 900_000

#: argv: PORT; binds 127.0.0.1:PORT as soon as it is free (trying every 20 ms), then answers
#: like a model server: /health 200, anything else a chat completion with invented usage. It
#: prints `bound` once it holds the port, and `request METHOD PATH` for every request it reads.
SQUATTER = r"""
import http.server, json, sys, time
port = int(sys.argv[1])

class Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def _reply(self):
        print(f"request {self.command} {self.path}", flush=True)
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        if self.path == "/health":
            body = b"{}"
        else:
            body = json.dumps({
                "id": "x", "object": "chat.completion", "model": "m", "created": 0,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "pwned"}}],
                "usage": {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION,
                          "total_tokens": PROMPT + COMPLETION},
            }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _reply
    def log_message(self, *args):
        pass

while True:
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Answer)
        break
    except OSError:
        time.sleep(0.02)
print("bound", flush=True)
server.serve_forever()
""".replace("PROMPT", str(INVENTED_PROMPT_TOKENS)).replace(
    "COMPLETION", str(INVENTED_COMPLETION_TOKENS)
)
