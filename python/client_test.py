"""The Python client through the real daemons: a weft-coordinator with client and worker tokens
and two cpu weft-workers on 127.0.0.1 (ports picked at run time), driven only through `weft`.

An MLP job (2 ranks, data parallel, npy data and safetensors initial parameters written here
under the cluster's --data_root) is submitted from a YAML file in a folder of the client's, its
paths the cluster's, watched to SUCCEEDED, and its losses compared with an independent float64
numpy reference of the same training; it is listed; a second, long job submitted as a dict is
cancelled while it runs, then deleted; a bad spec and a wrong token raise WeftError with the code and
the coordinator's message; server reflection lists the JobService; the example script runs a
job. A second coordinator serves TLS: the client reaches it with tls_ca and tls_server_name.
"""

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Dict, List, Optional, Sequence

import numpy as np

import weft
from weft.v1 import job_pb2

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "weft")

# The MLP: fc0 (4 -> 8) relu fc1 (8 -> 3), MSE, SGD; 16 samples, a global batch of 8 split over
# dp = 2, so step s uses samples (s-1)*8 .. s*8-1 mod 16.
NUM_SAMPLES, IN, HIDDEN, OUT, BATCH, STEPS, LR = 16, 4, 8, 3, 8, 6, 0.1

# Its files are named under the cluster's data root (test_1 writes them in jobs/ there).
MLP_SPEC = f"""\
name: py-mlp
mesh: {{shape: [2], dim_names: [dp]}}
model:
  layers:
    - {{name: fc0, type: linear, in_features: {IN}, out_features: {HIDDEN}}}
    - {{name: act0, type: relu}}
    - {{name: fc1, type: linear, in_features: {HIDDEN}, out_features: {OUT}}}
  loss: mse
data: {{source: npy, input: jobs/inputs.npy, label: jobs/labels.npy, batch_size: {BATCH}}}
optimizer: {{type: sgd, lr: {LR}}}
train: {{steps: {STEPS}, seed: 7}}
init_from: jobs/init.safetensors
"""


def write_safetensors(path: str, tensors: Dict[str, np.ndarray]) -> None:
    """float32 tensors in the safetensors layout: the header's length (u64 LE), the JSON header
    (padded with spaces to 8 bytes), then the data in header order."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def reference_losses(params: Dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> List[float]:
    """The job's training in float64: each step's loss (mean squared error over the whole global
    batch, before the update), then plain SGD on every parameter."""
    w0, b0, w1, b1 = (params[k].astype(np.float64)
                      for k in ("fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"))
    x, y = x.astype(np.float64), y.astype(np.float64)
    losses = []
    for step in range(1, STEPS + 1):
        rows = [((step - 1) * BATCH + i) % NUM_SAMPLES for i in range(BATCH)]
        xb, yb = x[rows], y[rows]
        h = xb @ w0 + b0
        a = np.maximum(h, 0.0)
        out = a @ w1 + b1
        diff = out - yb
        losses.append(float(np.mean(diff * diff)))
        g = 2.0 * diff / diff.size
        gw1, gb1 = a.T @ g, g.sum(axis=0)
        gh = (g @ w1.T) * (h > 0)
        gw0, gb0 = xb.T @ gh, gh.sum(axis=0)
        w0, b0, w1, b1 = w0 - LR * gw0, b0 - LR * gb0, w1 - LR * gw1, b1 - LR * gb1
    return losses


class Daemons:
    """A weft-coordinator (with tokens) and cpu weft-workers as child processes, each logging to
    a file in `work`; stop() ends them all (SIGTERM, then SIGKILL)."""

    def __init__(self, work: str, workers: int, coordinator_flags: Sequence[str] = (),
                 worker_flags: Sequence[str] = ()):
        self.work = work
        self.procs: List[subprocess.Popen] = []
        self.logs: List[str] = []
        self.client_token = os.path.join(work, "client.token")
        self.worker_token = os.path.join(work, "worker.token")
        for path in (self.client_token, self.worker_token):
            with open(path, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            os.chmod(path, 0o600)
        port_file = os.path.join(work, "coordinator.port")
        coordinator = self._start("coordinator", [
            os.path.join(RUNFILES, "coordinator/weft-coordinator"), "--listen", "127.0.0.1:0",
            "--port_file", port_file, "--data_dir", os.path.join(work, "coordinator-data"),
            "--client_token_file", self.client_token, "--worker_token_file", self.worker_token,
            *coordinator_flags])
        self.address = f"127.0.0.1:{self._port(port_file, coordinator)}"
        for i in range(workers):
            self._start(f"worker{i}", [
                os.path.join(RUNFILES, "worker/weft-worker"), "--coordinator", self.address,
                "--device", "cpu", "--token_file", self.worker_token, *worker_flags])

    def _start(self, name: str, argv: List[str]) -> subprocess.Popen:
        log = os.path.join(self.work, name + ".log")
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def _port(self, port_file: str, proc: subprocess.Popen, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the coordinator exited ({proc.returncode}):\n{self.log_text()}")
            try:
                with open(port_file) as f:
                    text = f.read()
                if text.endswith("\n") and text.strip().isdigit():
                    return int(text)
            except FileNotFoundError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"no port in {port_file} within {timeout} s:\n{self.log_text()}")

    def log_text(self) -> str:
        parts = []
        for log in self.logs:
            with open(log, errors="replace") as f:
                parts.append(f"--- {os.path.basename(log)}\n{f.read()[-6000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class ClientTest(unittest.TestCase):
    """One cluster for the class; the tests run in name order (the MLP job first, on both
    workers)."""

    daemons: Daemons
    client: weft.Client
    work: str
    data_root: str
    mlp_job: Optional[str] = None

    @classmethod
    def setUpClass(cls) -> None:
        cls.work = tempfile.mkdtemp(prefix="client_test.", dir=os.environ.get("TEST_TMPDIR"))
        # The cluster's files: data and initial parameters under data/, checkpoints under
        # checkpoints/; the client's spec files live elsewhere.
        cls.data_root = os.path.join(cls.work, "data")
        roots = ["--data_root", cls.data_root,
                 "--checkpoint_root", os.path.join(cls.work, "checkpoints")]
        for folder in roots[1::2]:
            os.makedirs(folder)
        cls.daemons = Daemons(cls.work, workers=2, coordinator_flags=roots, worker_flags=roots)
        try:
            cls.client = weft.Client(cls.daemons.address, token_file=cls.daemons.client_token)
            weft.wait_for_workers(cls.client, 2, timeout=30)
        except BaseException:
            print(cls.daemons.log_text(), file=sys.stderr)
            cls.daemons.stop()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()
        cls.daemons.stop()

    def run(self, result=None):  # the daemons' logs with any failure
        result = super().run(result)
        if result is not None and not result.wasSuccessful() and not getattr(self, "_logged", 0):
            self._logged = 1
            print(self.daemons.log_text(), file=sys.stderr)
        return result

    def test_1_mlp_from_a_yaml_file_succeeds_with_the_reference_losses(self) -> None:
        rng = np.random.default_rng(15)
        x = rng.standard_normal((NUM_SAMPLES, IN)).astype(np.float32)
        y = rng.standard_normal((NUM_SAMPLES, OUT)).astype(np.float32)
        params = {
            "fc0.weight": rng.uniform(-0.5, 0.5, (IN, HIDDEN)).astype(np.float32),
            "fc0.bias": rng.uniform(-0.5, 0.5, (HIDDEN,)).astype(np.float32),
            "fc1.weight": rng.uniform(-0.35, 0.35, (HIDDEN, OUT)).astype(np.float32),
            "fc1.bias": rng.uniform(-0.35, 0.35, (OUT,)).astype(np.float32),
        }
        # The files are the cluster's (under its data root, in jobs/); the spec, in a folder of the
        # client's, names them relative to that root.
        jobs = os.path.join(self.data_root, "jobs")
        os.makedirs(jobs)
        np.save(os.path.join(jobs, "inputs.npy"), x)
        np.save(os.path.join(jobs, "labels.npy"), y)
        write_safetensors(os.path.join(jobs, "init.safetensors"), params)
        client_folder = os.path.join(self.work, "client")
        os.makedirs(client_folder)
        spec_path = os.path.join(client_folder, "mlp.yaml")
        with open(spec_path, "w") as f:
            f.write(MLP_SPEC)
        # Resolved against the client's folder, the paths lead outside the cluster's data root.
        with self.assertRaises(weft.WeftError) as local:
            self.client.submit(spec_path, local_paths=True)
        self.assertEqual(local.exception.code, "PERMISSION_DENIED", local.exception.message)
        self.assertIn(os.path.join(client_folder, "jobs/inputs.npy"), local.exception.message)

        job_id = self.client.submit(spec_path)
        type(self).mlp_job = job_id
        states, steps = [], []
        for event in self.client.watch(job_id, timeout=60):
            self.assertEqual(event.job_id, job_id)
            kind = event.WhichOneof("event")
            if kind == "state":
                states.append(weft.state_name(event.state))
            elif kind == "step":
                steps.append(event.step.step)
        self.assertEqual(states[-1], "SUCCEEDED", states)
        self.assertIn("RUNNING", states)
        self.assertEqual(steps, list(range(1, STEPS + 1)))

        job = self.client.get(job_id)
        self.assertEqual(job.state, weft.JobState.SUCCEEDED)
        self.assertEqual(job.spec.data.input, os.path.join(jobs, "inputs.npy"))
        self.assertEqual(job.spec.init_from, os.path.join(jobs, "init.safetensors"))
        losses = [s.loss for s in job.steps]
        self.assertEqual([s.step for s in job.steps], list(range(1, STEPS + 1)))
        reference = reference_losses(params, x, y)
        for step, (got, want) in enumerate(zip(losses, reference), start=1):
            self.assertLessEqual(abs(got - want) / abs(want), 1e-5,
                                 f"step {step}: loss {got}, float64 reference {want}")
        # The two batches alternate: each one's loss falls from one visit to the next.
        for step in range(3, STEPS + 1):
            self.assertLess(losses[step - 1], losses[step - 3], f"step {step} against {step - 2}")

    def test_2_list_shows_the_job(self) -> None:
        self.assertIsNotNone(self.mlp_job, "test_1 submitted no job")
        summaries = {j.id: j for j in self.client.list()}
        self.assertIn(self.mlp_job, summaries)
        mlp = summaries[self.mlp_job]
        self.assertEqual((mlp.name, mlp.state, mlp.total_steps, mlp.last_step.step),
                         ("py-mlp", weft.JobState.SUCCEEDED, STEPS, STEPS))
        self.assertIn(self.mlp_job, [j.id for j in self.client.list(state="SUCCEEDED")])
        self.assertNotIn(self.mlp_job, [j.id for j in self.client.list(state=job_pb2.RUNNING)])
        self.assertEqual(len(self.client.list(limit=1)), 1)

    def test_3_cancel_a_running_job_submitted_as_a_dict(self) -> None:
        spec = {
            "name": "py-long",
            "mesh": {"shape": [1], "dim_names": ["dp"]},
            "model": {"layers": [{"name": "fc0", "type": "linear", "in_features": 16,
                                  "out_features": 16}], "loss": "mse"},
            "data": {"source": "synthetic", "sample_shape": [16], "label_shape": [16],
                     "num_samples": 64, "batch_size": 8},
            "optimizer": {"type": "sgd", "lr": 0.01},
            "train": {"steps": 1000000},
        }
        job_id = self.client.submit(spec)
        running = False
        for event in self.client.watch(job_id, timeout=60):
            if event.WhichOneof("event") == "state":
                running = event.state == weft.JobState.RUNNING
            elif event.WhichOneof("event") == "step" and running:
                break  # running, with a step done: cancel it mid-run
        self.assertTrue(running, "the long job never ran")
        self.assertIn(job_id, [j.id for j in self.client.list(state="RUNNING")])
        with self.assertRaises(weft.WeftError) as running_delete:
            self.client.delete(job_id)
        self.assertEqual(running_delete.exception.code, "FAILED_PRECONDITION")
        self.assertIn("cancel it first", running_delete.exception.message)
        self.client.cancel(job_id, reason="the Python client's test")
        job = self.client.wait(job_id, timeout=30)
        self.assertEqual(weft.state_name(job.state), "CANCELLED", job.message)
        self.assertIn("the Python client's test", job.message)
        with self.assertRaises(weft.WeftError) as again:
            self.client.cancel(job_id)
        self.assertEqual(again.exception.code, "FAILED_PRECONDITION")
        deleted = self.client.delete(job_id)
        self.assertEqual((deleted.id, weft.state_name(deleted.state)), (job_id, "CANCELLED"))
        with self.assertRaises(weft.WeftError) as gone:
            self.client.get(job_id)
        self.assertEqual(gone.exception.code, "NOT_FOUND")
        self.assertEqual(gone.exception.message, f"job {job_id} was deleted")
        self.assertNotIn(job_id, [j.id for j in self.client.list()])

    def test_4_a_bad_spec_is_invalid_argument_naming_the_field(self) -> None:
        spec = {
            "name": "py-bad",
            "mesh": {"shape": [1]},
            "model": {"layers": [{"name": "fc0", "type": "linear", "in_feature": 4,
                                  "out_features": 4}]},
            "data": {"source": "synthetic", "sample_shape": [4], "label_shape": [4],
                     "num_samples": 8, "batch_size": 4},
            "optimizer": {"type": "sgd", "lr": 0.1},
            "train": {"steps": 1},
        }
        with self.assertRaises(weft.WeftError) as bad:
            self.client.submit(spec)
        self.assertEqual(bad.exception.code, "INVALID_ARGUMENT")
        self.assertIn('model.layers[0] (fc0): unknown key "in_feature"', bad.exception.message)
        self.assertNotIn("py-bad", [j.name for j in self.client.list()])

        with self.assertRaises(weft.WeftError) as missing:
            self.client.submit(os.path.join(self.work, "no-such.yaml"))
        self.assertEqual(missing.exception.code, "NOT_FOUND")
        with self.assertRaises(weft.WeftError) as unknown:
            self.client.get("no-such-job")
        self.assertEqual(unknown.exception.code, "NOT_FOUND")

    def test_5_a_wrong_or_missing_token_is_unauthenticated(self) -> None:
        wrong = os.path.join(self.work, "wrong.token")
        with open(wrong, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        os.chmod(wrong, 0o600)
        for token_file in (wrong, self.daemons.worker_token, None):
            with weft.Client(self.daemons.address, token_file=token_file) as other:
                with self.assertRaises(weft.WeftError) as denied:
                    other.list()
                self.assertEqual(denied.exception.code, "UNAUTHENTICATED", token_file)
                self.assertIn("JobService", denied.exception.message)
                with self.assertRaises(weft.WeftError) as denied_watch:
                    list(other.watch(self.mlp_job or "x"))
                self.assertEqual(denied_watch.exception.code, "UNAUTHENTICATED")
        # The token file's own checks come before any call.
        empty = os.path.join(self.work, "empty.token")
        open(empty, "w").close()
        os.chmod(empty, 0o600)
        with self.assertRaises(weft.WeftError) as bad_file:
            weft.Client(self.daemons.address, token_file=empty)
        self.assertEqual((bad_file.exception.code, bad_file.exception.message),
                         ("INVALID_ARGUMENT", f"token file {empty}: empty"))
        # As weft-coordinator and weftctl: no loose file, no short token.
        short = os.path.join(self.work, "short.token")
        with open(short, "w") as f:
            f.write("abc123\n")
        os.chmod(short, 0o600)
        os.chmod(wrong, 0o644)
        for path, why in ((short, "fewer than 16 bytes"),
                          (wrong, "group or others may read or write it (mode 0644)")):
            with self.assertRaises(weft.WeftError) as refused:
                weft.Client(self.daemons.address, token_file=path)
            self.assertEqual(refused.exception.code, "INVALID_ARGUMENT")
            self.assertIn(why, refused.exception.message)

    def test_6_server_reflection_lists_the_job_service(self) -> None:
        # ServerReflectionRequest{list_services: "*"} (field 7) as bytes, the reply read as bytes:
        # what grpcurl asks when it is given no protos (README.md, "Python client").
        # With the client token: a coordinator that has one asks reflection for it too.
        import grpc
        with open(self.daemons.client_token) as f:
            bearer = [("authorization", "Bearer " + f.read().strip())]
        with grpc.insecure_channel(self.daemons.address) as channel:
            info = channel.stream_stream(
                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                request_serializer=lambda b: b, response_deserializer=lambda b: b)
            replies = list(info(iter([b"\x3a\x01*"]), timeout=10, metadata=bearer))
            with self.assertRaises(grpc.RpcError) as refused:
                list(info(iter([b"\x3a\x01*"]), timeout=10))
        self.assertEqual(len(replies), 1)
        self.assertIn(b"weft.v1.JobService", replies[0])
        self.assertEqual(refused.exception.code(), grpc.StatusCode.CANCELLED)

    def test_7_the_example_script_watches_a_job_to_success(self) -> None:
        spec = os.path.join(self.work, "example.yaml")
        with open(spec, "w") as f:
            f.write(MLP_SPEC.replace("name: py-mlp", "name: py-example"))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                   WEFT_COORDINATOR=self.daemons.address, WEFT_TOKEN_FILE=self.daemons.client_token)
        run = subprocess.run(
            [sys.executable, os.path.join(RUNFILES, "examples/python/submit_and_watch.py"), spec],
            env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("RUNNING", run.stdout)
        self.assertIn(f"step {STEPS}  loss ", run.stdout)
        self.assertRegex(run.stdout, rf"job \S+ SUCCEEDED: {STEPS} steps, last loss ")


class TlsTest(unittest.TestCase):
    """A coordinator serving TLS with a self-signed certificate for the name weft.test only: the
    client reaches it with tls_ca and tls_server_name, and not without them."""

    def test_tls_ca_and_server_name(self) -> None:
        work = tempfile.mkdtemp(prefix="tls_test.", dir=os.environ.get("TEST_TMPDIR"))
        cert, key = os.path.join(work, "server.crt"), os.path.join(work, "server.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=weft.test", "-addext", "subjectAltName=DNS:weft.test",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        daemons = Daemons(work, workers=0, coordinator_flags=["--tls_cert", cert, "--tls_key", key])
        try:
            with weft.Client(daemons.address, token_file=daemons.client_token, tls_ca=cert,
                             tls_server_name="weft.test", timeout=10) as client:
                self.assertEqual(client.list(), [])
            with weft.Client(daemons.address, token_file=daemons.client_token, tls_ca=cert,
                             timeout=10) as wrong_name:
                with self.assertRaises(weft.WeftError) as refused:
                    wrong_name.list()
                self.assertEqual(refused.exception.code, "UNAVAILABLE")
                self.assertIn("the TLS handshake failed", refused.exception.message)
            with weft.Client(daemons.address, token_file=daemons.client_token,
                             timeout=10) as plaintext:
                with self.assertRaises(weft.WeftError) as refused:
                    plaintext.list()
                self.assertEqual(refused.exception.code, "UNAVAILABLE")
                self.assertIn(f"cannot reach coordinator at {daemons.address}",
                              refused.exception.message)
        except BaseException:
            print(daemons.log_text(), file=sys.stderr)
            raise
        finally:
            daemons.stop()
        with self.assertRaises(weft.WeftError) as no_ca:
            weft.Client(daemons.address, tls_server_name="weft.test")
        self.assertEqual(no_ca.exception.code, "INVALID_ARGUMENT")


if __name__ == "__main__":
    unittest.main(verbosity=2)
