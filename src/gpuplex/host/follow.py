"""`gpuplex host run --follow-store`: the host runs the control plane's applied revision.

Each pass asks the store for the newest revision (one indexed query). A new one becomes this
host's desired state with its placements exactly as planned when it was applied (this module never
plans), is written to desired.json (what `host status` and a restarted supervisor read), and is
reconciled on the same pass. A revision this host cannot run (its node missing, ports that clash,
a command that cannot start) is refused with an event, and the previous one keeps running.
"""

from __future__ import annotations

import logging

from gpuplex.clock import utc_now
from gpuplex.errors import GpuplexError
from gpuplex.host.session import SpecTransform, desired_file
from gpuplex.host.state import DesiredFile, Event, StateDir
from gpuplex.revision import AppliedRevisions
from gpuplex.settings import HostSettings

log = logging.getLogger(__name__)


class RevisionFollower:
    def __init__(
        self,
        revisions: AppliedRevisions,
        settings: HostSettings,
        transform: SpecTransform | None = None,
    ) -> None:
        self._revisions = revisions
        self._settings = settings
        self._dirs = StateDir(settings.state_dir)
        self._transform = transform
        self.taken: int | None = None  # the newest revision looked at, run or refused

    def take_newest(self) -> DesiredFile | None:
        """The desired state of a revision newer than the last one taken, written to
        desired.json; None when there is none, or when it cannot run here (an event says why)."""
        try:
            applied = self._revisions.get()
        except GpuplexError as error:  # the store is away: ask again on the next pass
            log.warning("cannot read the applied revision: %s", error.message)
            return None
        if applied is None or applied.revision == self.taken:
            return None
        self.taken = applied.revision
        target = f"revision {applied.revision}"
        try:
            desired, problems = desired_file(
                applied.spec,
                applied.plan,
                applied.revision,
                applied.spec_sha256,
                target,
                self._settings,
                self._transform,
            )
        except GpuplexError as error:
            self._event("revision_refused", target, f"not run here: {error.message}")
            return None
        if problems:
            self._event("revision_refused", target, "not run here: " + "; ".join(problems))
            return None
        self._dirs.write_desired(desired)
        running = len(desired.host.workloads)
        self._event("revision", target, f"running it: {running} replicas on this node")
        return desired

    def _event(self, kind: str, target: str, message: str) -> None:
        self._dirs.append_event(Event(at=utc_now(), kind=kind, target=target, message=message))
