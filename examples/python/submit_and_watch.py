#!/usr/bin/env python3
"""A service's use of Weft's Python client: submit a job spec, print its progress, and exit 0 only
if it SUCCEEDED (1 if it failed or was cancelled, 2 if a call failed).

    PYTHONPATH=python:bazel-bin/python python3 examples/python/submit_and_watch.py \
        examples/quickstart.yaml --coordinator 127.0.0.1:7070 --token_file client.token
    bazel run //examples/python:submit_and_watch -- examples/quickstart.yaml

--coordinator, --token_file and --tls_ca default to $WEFT_COORDINATOR, $WEFT_TOKEN_FILE and
$WEFT_TLS_CA, as weftctl's do.
"""

import argparse
import os
import sys

import weft


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="a job spec (YAML); paths in it are relative to its folder")
    parser.add_argument("--coordinator", help="HOST:PORT (default $WEFT_COORDINATOR, else "
                        f"{weft.DEFAULT_COORDINATOR})")
    parser.add_argument("--token_file", help="the coordinator's client token")
    parser.add_argument("--tls_ca", help="PEM CA of the coordinator's certificate")
    args = parser.parse_args()
    # `bazel run` runs this in its runfiles: a relative path is the caller's.
    spec = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), args.spec)

    try:
        with weft.Client(args.coordinator, token_file=args.token_file, tls_ca=args.tls_ca) as client:
            job_id = client.submit(spec)
            print(f"submitted {job_id}", flush=True)
            for event in client.watch(job_id):
                kind = event.WhichOneof("event")
                if kind == "state":
                    why = f": {event.message}" if event.message else ""
                    print(f"{weft.state_name(event.state)}{why}", flush=True)
                elif kind == "step":
                    s = event.step
                    print(f"step {s.step}  loss {s.loss:.6f}  {s.samples_per_second:.0f} samples/s",
                          flush=True)
                elif kind == "saved":
                    print(f"checkpoint {event.saved.path}", flush=True)
                elif kind == "restart":
                    print(f"restart after attempt {event.restart.attempt}: {event.restart.cause}",
                          flush=True)
            job = client.get(job_id)
    except weft.WeftError as e:
        print(f"submit_and_watch: {e}", file=sys.stderr)
        return 2
    if job.state != weft.JobState.SUCCEEDED:
        print(f"job {job_id} {weft.state_name(job.state)}: {job.message}", file=sys.stderr)
        return 1
    print(f"job {job_id} SUCCEEDED: {len(job.steps)} steps, last loss {job.steps[-1].loss:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
