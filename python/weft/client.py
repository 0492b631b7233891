"""Weft's JobService over gRPC, for Python services: submit, watch, get, list, cancel, delete,
wait.

E.g.
    client = weft.Client("127.0.0.1:7070", token_file="/etc/weft/client.token")
    job_id = client.submit("examples/quickstart.yaml")
    for event in client.watch(job_id):       # weft.v1 JobEvent messages
        if event.HasField("step"):
            print(event.step.step, event.step.loss)
    job = client.get(job_id)                 # a weft.v1 Job, every step included
    assert job.state == weft.JobState.SUCCEEDED

The messages are the generated ones of proto/weft/v1 (weft.v1.job_pb2, weft.v1.service_pb2), so
every field README.md and the protos document is there as is.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from weft.v1 import job_pb2, service_pb2, service_pb2_grpc

DEFAULT_COORDINATOR = "127.0.0.1:7070"

# What each GetJob, ListJobs or GetJobLogs call asks for: the coordinator's largest pages (it
# gives fewer where its bound is lower), as weftctl asks.
_STEPS_PER_CALL = 10000
_JOBS_PER_CALL = 1000
_LOG_LINES_PER_CALL = 10000
# A token file holds one line of printable ASCII, 16 bytes to 4 KiB, readable by its owner only
# (common/bearer_token.h).
_MAX_TOKEN_BYTES = 4096
_MIN_TOKEN_BYTES = 16

JobState = job_pb2.JobState
_FINAL_STATES = (job_pb2.SUCCEEDED, job_pb2.FAILED, job_pb2.CANCELLED)

Spec = Union[str, "os.PathLike[str]", Mapping[str, Any], job_pb2.JobSpec]


class WeftError(Exception):
    """A call that failed: `code` is the gRPC status code's name (e.g. "INVALID_ARGUMENT",
    "NOT_FOUND", "UNAUTHENTICATED", "UNAVAILABLE"), `message` the coordinator's message (for
    INVALID_ARGUMENT it names the field, e.g. "model.layers[2] (fc1).in_feature: unknown key ...").
    Problems found before any call (an unreadable token file, a missing spec file) carry the
    code weftctl's error would have.
    """

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def state_name(state: int) -> str:
    """A JobState's name, e.g. "SUCCEEDED"."""
    return job_pb2.JobState.Name(state)


def is_final(state: int) -> bool:
    """Whether a job in `state` has ended: SUCCEEDED, FAILED or CANCELLED."""
    return state in _FINAL_STATES


def _as_json(value: Any) -> Any:
    """json.dumps' fallback: a mapping that is not a dict, as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a job spec holds mappings, lists, strings, numbers and booleans, "
                    f"not {type(value).__name__}")


def read_token_file(path: str) -> str:
    """The bearer token in `path` as weft-coordinator and weftctl read it: the file's bytes less
    trailing whitespace, one line of printable ASCII, at most 4 KiB. Messages never quote it."""
    try:
        if not os.path.isfile(path):
            raise WeftError("INVALID_ARGUMENT", f"token file {path}: not a regular file")
        with open(path, "rb") as f:
            data = f.read(_MAX_TOKEN_BYTES + 1)
        mode = os.stat(path).st_mode & 0o777
    except OSError as e:
        raise WeftError("INVALID_ARGUMENT", f"token file {path}: {e.strerror}") from None
    if len(data) > _MAX_TOKEN_BYTES:
        raise WeftError("INVALID_ARGUMENT", f"token file {path}: more than {_MAX_TOKEN_BYTES} bytes")
    if mode & 0o077:
        raise WeftError("INVALID_ARGUMENT", f"token file {path}: group or others may read or write "
                        f"it (mode 0{mode:o}); chmod 600 it, as ssh refuses a loose key")
    token = data.rstrip(b"\r\n \t")
    if not token:
        raise WeftError("INVALID_ARGUMENT", f"token file {path}: empty")
    if any(b < 0x21 or b > 0x7E for b in token):
        raise WeftError("INVALID_ARGUMENT", f"token file {path}: holds a byte that is not "
                        "printable ASCII (one line, no spaces)")
    if len(token) < _MIN_TOKEN_BYTES:
        raise WeftError("INVALID_ARGUMENT", f"token file {path}: fewer than {_MIN_TOKEN_BYTES} "
                        "bytes; a short token is guessed (make one with `openssl rand -hex 32`)")
    return token.decode("ascii")


class Client:
    """A connection to a Weft coordinator's JobService.

    Args:
        address: HOST:PORT of the coordinator; None: $WEFT_COORDINATOR, else 127.0.0.1:7070.
        token_file: the coordinator's client token (`--client_token_file`), sent with every call
            as `authorization: Bearer <token>`; None: $WEFT_TOKEN_FILE, else no token.
        tls_ca: PEM file of the CA that signed the coordinator's certificate: the channel uses
            TLS; None: $WEFT_TLS_CA, else plaintext.
        tls_server_name: the name the certificate must carry when it is not the address's host.
        timeout: seconds each unary call may take (a watch has no deadline unless wait() or
            watch() is given one).

    Like weftctl's flags; the token file and CA are read here, so that a bad one fails before any
    call. Use it as a context manager, or call close(), to release the channel.
    """

    def __init__(self, address: Optional[str] = None, token_file: Optional[str] = None,
                 tls_ca: Optional[str] = None, tls_server_name: Optional[str] = None,
                 timeout: float = 30):
        self.address = address or os.environ.get("WEFT_COORDINATOR") or DEFAULT_COORDINATOR
        self.timeout = timeout
        token_file = token_file or os.environ.get("WEFT_TOKEN_FILE") or None
        tls_ca = tls_ca or os.environ.get("WEFT_TLS_CA") or None
        self._metadata: Tuple[Tuple[str, str], ...] = ()
        if token_file:
            self._metadata = (("authorization", "Bearer " + read_token_file(token_file)),)
        # GetJob returns the job's spec whole (up to 1 MiB) with a page of up to 10,000 steps.
        options: List[Tuple[str, Any]] = [("grpc.max_receive_message_length", -1)]
        if tls_server_name and not tls_ca:
            raise WeftError("INVALID_ARGUMENT",
                            "tls_server_name needs tls_ca (it names the certificate TLS checks)")
        self._tls = bool(tls_ca)
        if tls_ca:
            try:
                with open(tls_ca, "rb") as f:
                    ca = f.read()
            except OSError as e:
                raise WeftError("INVALID_ARGUMENT", f"tls_ca {tls_ca}: {e.strerror}") from None
            if b"-----BEGIN CERTIFICATE-----" not in ca:
                raise WeftError("INVALID_ARGUMENT", f"tls_ca {tls_ca}: holds no PEM certificate")
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(
                self.address, grpc.ssl_channel_credentials(root_certificates=ca), options)
        else:
            self._channel = grpc.insecure_channel(self.address, options)
        self._stub = service_pb2_grpc.JobServiceStub(self._channel)

    def close(self) -> None:
        """Closes the channel; calls in progress end with CANCELLED."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ---- JobService ----

    def submit(self, spec: Spec, base_dir: Optional[str] = None,
               local_paths: bool = False) -> str:
        """Submits a job; returns its id once the coordinator has validated and stored it.

        `spec` is one of:
          - the path of a YAML spec file (docs/job-spec.md);
          - a dict of the same YAML structure;
          - a weft.v1 JobSpec message, sent as is (its paths should be absolute).
        The YAML is parsed by the coordinator with weftctl's own reader (SubmitJobRequest
        spec_yaml), so the errors are weftctl's: INVALID_ARGUMENT naming the field and the line.

        The paths the spec names (data.input, data.label, data.path, init_from, checkpoint.dir,
        model.config_file) are the cluster's, as with `weftctl submit`: the coordinator resolves
        relative ones against its --data_root (checkpoint.dir against its --checkpoint_root) and
        checks the files. For a client that sees the cluster's files at the same paths,
        `local_paths=True` resolves them against the file's folder instead (a dict's: `base_dir`,
        default the current folder), as `weftctl submit --check-local-files` does; a dict given a
        `base_dir` has its paths resolved against it too.
        """
        request = service_pb2.SubmitJobRequest()
        if isinstance(spec, job_pb2.JobSpec):
            if base_dir is not None or local_paths:
                raise WeftError("INVALID_ARGUMENT",
                                "base_dir, local_paths: only with a spec file or dict")
            request.spec.CopyFrom(spec)
        elif isinstance(spec, Mapping):
            # JSON is YAML: the coordinator's reader takes it as it is.
            request.spec_yaml = json.dumps(spec, indent=2, default=_as_json).encode("utf-8")
            if base_dir is not None or local_paths:
                request.spec_dir = os.path.abspath(base_dir if base_dir is not None else os.getcwd())
        elif isinstance(spec, (str, os.PathLike)):
            if base_dir is not None:
                raise WeftError("INVALID_ARGUMENT",
                                "base_dir: only with a spec dict (a file's folder is its base)")
            path = os.fspath(spec)
            if os.path.isdir(path):
                raise WeftError("INVALID_ARGUMENT", f"{path}: is a directory, not a job spec")
            try:
                with open(path, "r", encoding="utf-8") as f:
                    request.spec_yaml = f.read().encode("utf-8")
            except FileNotFoundError:
                raise WeftError("NOT_FOUND", f"{path}: no such file") from None
            except (OSError, UnicodeDecodeError) as e:
                raise WeftError("INVALID_ARGUMENT", f"{path}: cannot read: {e}") from None
            if local_paths:
                request.spec_dir = os.path.dirname(os.path.abspath(path))
        else:
            raise TypeError(f"spec: a path, a dict or a weft.v1 JobSpec, not {type(spec).__name__}")
        return self._call(self._stub.SubmitJob, request).job_id

    def get(self, job_id: str) -> job_pb2.Job:
        """The job with every step of its latest attempt (read a page of steps at a time)."""
        request = service_pb2.GetJobRequest(job_id=job_id, steps_page_size=_STEPS_PER_CALL)
        job = self._call(self._stub.GetJob, request)
        if not job.next_steps_page_token:
            return job
        steps = list(job.steps)
        while job.next_steps_page_token:
            request.steps_page_token = job.next_steps_page_token
            job = self._call(self._stub.GetJob, request)
            steps.extend(job.steps)
        # The latest record (its spec copied once), with the steps of every page.
        merged = job_pb2.Job()
        merged.steps.extend(steps)
        job.ClearField("steps")
        merged.MergeFrom(job)
        return merged

    def list(self, state: Union[None, int, str] = None,
             limit: int = 100) -> List[job_pb2.JobSummary]:
        """At most `limit` job summaries in submit order (no spec, the last step only), of every
        job or of those in `state` (a JobState value or name, e.g. "RUNNING"); read a page at a
        time."""
        if isinstance(state, str):
            try:
                state = job_pb2.JobState.Value(state.upper())
            except ValueError:
                raise WeftError("INVALID_ARGUMENT", f"state: unknown job state {state!r}; known: "
                                + ", ".join(job_pb2.JobState.keys()[1:])) from None
        if limit < 0:
            raise WeftError("INVALID_ARGUMENT", f"limit: must be >= 0, got {limit}")
        request = service_pb2.ListJobsRequest(state=state or job_pb2.JOB_STATE_UNSPECIFIED)
        jobs: List[job_pb2.JobSummary] = []
        while len(jobs) < limit:
            request.page_size = min(limit - len(jobs), _JOBS_PER_CALL)
            page = self._call(self._stub.ListJobs, request)
            jobs.extend(page.jobs[:limit - len(jobs)])
            # An empty page ends the listing whatever its token says: no call without progress.
            if not page.next_page_token or not page.jobs:
                break
            request.page_token = page.next_page_token
        return jobs

    def cancel(self, job_id: str, reason: str = "") -> job_pb2.Job:
        """Cancels the job: a pending one is CANCELLED at once; a running one once its workers
        confirm (or after the coordinator's grace period). Returns the job as it is after the
        call, without its steps; FAILED_PRECONDITION for a job that has ended."""
        return self._call(self._stub.CancelJob,
                          service_pb2.CancelJobRequest(job_id=job_id, reason=reason))

    def delete(self, job_id: str) -> job_pb2.Job:
        """Deletes a job that ended (SUCCEEDED, FAILED or CANCELLED) with its events and log
        lines; its checkpoints stay. Returns the job as it was, without its steps.
        FAILED_PRECONDITION for a job that has not ended (cancel it first); NOT_FOUND for an
        unknown or already deleted job."""
        return self._call(self._stub.DeleteJob, service_pb2.DeleteJobRequest(job_id=job_id))

    def watch(self, job_id: str, timeout: Optional[float] = None) -> Iterator[job_pb2.JobEvent]:
        """Yields the job's events (weft.v1 JobEvent: a state change, a step's metrics with its
        lr and grad_norm, an evaluation's held-out loss, a checkpoint saved, a restart), first
        those so far, then new ones, and returns after the
        one that puts the job in a final state. Raises WeftError UNAVAILABLE when the stream ends
        before that (the coordinator went away), DEADLINE_EXCEEDED after `timeout` seconds."""
        call = self._stub.WatchJob(service_pb2.WatchJobRequest(job_id=job_id), timeout=timeout,
                                   metadata=self._metadata)
        last = job_pb2.JOB_STATE_UNSPECIFIED
        try:
            for event in call:
                yield event
                if event.WhichOneof("event") == "state":
                    last = event.state
                    if is_final(last):
                        return
        except grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            call.cancel()  # the coordinator closes the stream after the final state; do not rely on it
        raise WeftError("UNAVAILABLE", f"the watch stream of job {job_id} ended before the job "
                        f"finished (last state {state_name(last)})")

    def wait(self, job_id: str, timeout: Optional[float] = None) -> job_pb2.Job:
        """Watches the job until it ends; returns it then (get(): every step). Raises WeftError
        DEADLINE_EXCEEDED when it has not ended after `timeout` seconds."""
        for _ in self.watch(job_id, timeout=timeout):
            pass
        return self.get(job_id)

    def workers(self) -> List[service_pb2.WorkerInfo]:
        """The registered workers: device, state (idle | busy | lost), job and rank."""
        return list(self._call(self._stub.ListWorkers, service_pb2.ListWorkersRequest()).workers)

    def logs(self, job_id: str, rank: Optional[int] = None,
             attempt: Optional[int] = None) -> Iterator[service_pb2.JobLogLine]:
        """The lines the job's workers logged while they ran its ranks, in the coordinator's
        order (attempt, time, rank, line number), read a page at a time."""
        request = service_pb2.GetJobLogsRequest(job_id=job_id, page_size=_LOG_LINES_PER_CALL)
        if rank is not None:
            request.rank = rank
        if attempt is not None:
            request.attempt = attempt
        while True:
            page = self._call(self._stub.GetJobLogs, request)
            yield from page.lines
            if not page.next_page_token or not page.lines:
                return
            request.page_token = page.next_page_token

    # ---- errors ----

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(e) from None

    def _error(self, e: grpc.RpcError) -> WeftError:
        """WeftError with the call's code name and the coordinator's message; UNAVAILABLE and
        DEADLINE_EXCEEDED also name the address, as weftctl's do."""
        code: grpc.StatusCode = e.code()  # type: ignore[attr-defined]
        details: str = e.details() or ""  # type: ignore[attr-defined]
        name = code.name if code is not None else "UNKNOWN"
        if code == grpc.StatusCode.UNAVAILABLE:
            details = f"cannot reach coordinator at {self.address}: {details}{self._tls_hint(details)}"
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            details = f"coordinator at {self.address} did not answer in time: {details}"
        return WeftError(name, details)

    def _tls_hint(self, details: str) -> str:
        lower = details.lower()
        if self._tls and any(w in lower for w in ("ssl", "handshake", "certificate")):
            return (" (the TLS handshake failed: is the coordinator serving TLS (--tls_cert), and "
                    "does its certificate chain to tls_ca and name the host of the address, or "
                    "tls_server_name?)")
        if not self._tls and any(w in lower for w in ("socket closed", "connection reset",
                                                      "end of tcp stream")):
            return (" (the coordinator closed the connection: if it serves TLS (--tls_cert), "
                    "give the client its CA with tls_ca or $WEFT_TLS_CA)")
        return ""


def wait_for_workers(client: Client, count: int, timeout: float = 30) -> List[service_pb2.WorkerInfo]:
    """Polls until at least `count` workers are registered and not lost; returns them. Raises
    WeftError DEADLINE_EXCEEDED after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        live = [w for w in client.workers() if w.state != "lost"]
        if len(live) >= count:
            return live
        if time.monotonic() > deadline:
            raise WeftError("DEADLINE_EXCEEDED",
                            f"{len(live)} of {count} workers registered within {timeout} s")
        time.sleep(0.05)


__all__: Sequence[str] = ["Client", "WeftError", "JobState", "DEFAULT_COORDINATOR", "Spec",
                          "is_final", "read_token_file", "state_name", "wait_for_workers"]
