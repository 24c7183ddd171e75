"""A run's lease, as methods of the Store (`store.Store` mixes them in); the protocol is lease.py's.

``claim`` takes a run's lease for this process, ``heartbeat`` refreshes it and ``release`` drops
it; a lease whose holder died, or stopped its heartbeat on another host for the store's
``lease_timeout`` seconds, is taken over. A done run is never claimed (the claimer checks ``DONE``
after taking the lease); a broken one is, and its holder clears the unreadable result."""

from __future__ import annotations

import logging
from pathlib import Path

from depthscale import lease
from depthscale.atomic import remove_temp_files, remove_unless_file
from depthscale.store_verify import LIVE_FILES

log = logging.getLogger(__name__)


class StoreLeases:
    """The Store's lease methods (they use the Store's lease_timeout, run_path, run_dir, is_done,
    _clear_broken, _check_writable and its _leases: run id -> token of a lease it holds)."""

    # --- leases (the protocol is lease.py's) ---
    def _lease_path(self, rid: str) -> Path:
        return self.run_path(rid) / "lease"

    def lease_info(self, rid: str) -> dict | None:
        """The lease on a run if it is live, else None."""
        return lease.holder(self._lease_path(rid), self.lease_timeout)

    def claim(self, rid: str, owner: str = "") -> bool:
        """Take the run for this process; False if it is done or someone else holds a live lease."""
        self._check_writable()
        d = self.run_dir(rid)
        if self.is_done(rid):
            return False
        if rid in self._leases and self.heartbeat(rid):
            return True  # already ours
        token = lease.take(self._lease_path(rid), owner, self.lease_timeout)
        if token is None:
            return False
        self._leases[rid] = token
        if self.is_done(rid):  # finished by the previous holder just before it released
            self.release(rid)
            return False
        # temp files a killed writer left (we hold the lease: no one else writes here), but not
        # another contender's fresh lease temp file
        remove_temp_files(d, spare_prefix=lease.TEMP_PREFIX, spare_seconds=60)
        self._clear_broken(d)
        for name in LIVE_FILES:  # a directory or a FIFO at a file's name would fail every attempt
            what = remove_unless_file(d / name) if name != "lease" else None
            if what is not None:
                log.warning("run %s: %s was not a file (%s); removed before the run starts again", d, name, what)
        return True

    def _still_ours(self, rid: str) -> bool:
        """False only if this object took a lease on `rid` and the lease file now has another token."""
        token = self._leases.get(rid)
        return token is None or lease.still_held(self._lease_path(rid), token)

    def heartbeat(self, rid: str) -> bool:
        """Refresh this process's lease on `rid`; False if it is not (or no longer) ours."""
        token = self._leases.get(rid)
        return token is not None and lease.refresh(self._lease_path(rid), token)

    def release(self, rid: str) -> None:
        """Drop this process's lease on `rid` (a lease someone else holds is left alone)."""
        token = self._leases.pop(rid, None)
        if token is not None:
            lease.drop(self._lease_path(rid), token)

    def held(self) -> list[str]:
        """Run ids this object holds leases on."""
        return sorted(self._leases)
