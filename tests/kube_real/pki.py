"""The certificates a Kubernetes control plane on 127.0.0.1 needs, made fresh for each test session:
a CA, the API server's serving certificate (127.0.0.1, localhost and the in-cluster names), client
certificates for the admin (`O=system:masters`), the scheduler and the controller-manager, and the
RSA key pair that signs service-account tokens. Short-lived (a day), EC P-256 keys where Kubernetes
takes them, RSA where it must (service accounts)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=1)
_PEM = serialization.Encoding.PEM


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Pair
    apiserver: Pair
    admin: Pair
    scheduler: Pair
    controller_manager: Pair
    #: The service-account signing key (private) and its public half, for the API server to verify.
    sa_key: Path
    sa_pub: Path


def _name(common: str, organisation: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if organisation is not None:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organisation))
    return x509.Name(parts)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _issue(
    directory: Path,
    stem: str,
    subject: x509.Name,
    *,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    server_names: tuple[str, ...] = (),
    client: bool = False,
) -> tuple[Pair, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, signing_key = (subject, key) if ca is None else (ca[0].subject, ca[1])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=True)
    )
    if ca is None:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        if server_names:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server_names:
        alternatives: list[x509.GeneralName] = []
        for name in server_names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    cert = builder.sign(signing_key, hashes.SHA256())
    pair = Pair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(_PEM))
    _write_key(pair.key, key)
    return pair, cert, key


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_pair, ca_cert, ca_key = _issue(directory, "ca", _name("gpuplex-test-ca"), ca=None)
    ca = (ca_cert, ca_key)
    apiserver, _, _ = _issue(
        directory,
        "apiserver",
        _name("kube-apiserver"),
        ca=ca,
        server_names=(
            "127.0.0.1",
            "localhost",
            "10.96.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
    )
    admin, _, _ = _issue(
        directory, "admin", _name("gpuplex-test-admin", "system:masters"), ca=ca, client=True
    )
    scheduler, _, _ = _issue(
        directory, "scheduler", _name("system:kube-scheduler"), ca=ca, client=True
    )
    controller_manager, _, _ = _issue(
        directory, "controller-manager", _name("system:kube-controller-manager"), ca=ca, client=True
    )
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key, sa_pub = directory / "sa.key", directory / "sa.pub"
    _write_key(sa_key, sa)
    sa_pub.write_bytes(
        sa.public_key().public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return Pki(ca_pair, apiserver, admin, scheduler, controller_manager, sa_key, sa_pub)


def serving_pair(pki: Pki, directory: Path, stem: str, names: tuple[str, ...]) -> Pair:
    """A serving certificate for `names` signed by the session's CA, for a server the API server
    calls back (a webhook on 127.0.0.1): the API server trusts it given `pki.ca.cert`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca.key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca.key} is not the EC key make_pki writes")
    pair, _, _ = _issue(directory, stem, _name(stem), ca=(ca_cert, ca_key), server_names=names)
    return pair


def client_pair(pki: Pki, directory: Path, user: str, group: str) -> Pair:
    """A client certificate for `user` in `group` (the API server reads the subject's CN as the
    user name and O as a group), signed by the session's CA: a person of the company's directory,
    as an OIDC login would name them."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca.key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca.key} is not the EC key make_pki writes")
    pair, _, _ = _issue(directory, user, _name(user, group), ca=(ca_cert, ca_key), client=True)
    return pair
