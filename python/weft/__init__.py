"""Weft's Python client: a small layer over the coordinator's gRPC JobService.

E.g.
    import weft
    with weft.Client("127.0.0.1:7070", token_file="client.token") as client:
        job_id = client.submit("examples/quickstart.yaml")
        job = client.wait(job_id)
        print(weft.state_name(job.state), [s.loss for s in job.steps])

`weft.v1` holds the messages and stubs protoc generates from proto/weft/v1 at build time
(`bazel build //python:weft`); README.md's "Python client" says how to import both.
"""

import pkgutil

# The generated weft.v1 lies in Bazel's output tree (bazel-bin/python/weft/v1), this file in the
# source tree: with both folders on sys.path, `weft` spans the two.
__path__ = pkgutil.extend_path(__path__, __name__)

from weft.client import (  # noqa: E402  (after __path__, which weft.v1's import needs)
    DEFAULT_COORDINATOR,
    Client,
    JobState,
    Spec,
    WeftError,
    is_final,
    read_token_file,
    state_name,
    wait_for_workers,
)

__all__ = ["Client", "WeftError", "JobState", "DEFAULT_COORDINATOR", "Spec", "is_final",
           "read_token_file", "state_name", "wait_for_workers"]
