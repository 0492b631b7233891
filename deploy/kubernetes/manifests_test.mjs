// Every manifest given on the command line validates cleanly, and broken copies of weft.yaml
// (a typo'd field, a wrong type, a missing name, a bad enum, documents that disagree with each
// other) are each rejected naming the document and the field. Run by manifests_test.sh.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { test } from "node:test";
import { parseManifest, validateManifest } from "../../tools/k8s/validate.mjs";

const manifests = process.argv.slice(2);
const weftYaml = manifests.find((m) => basename(m) === "weft.yaml");

test("manifests are given", () => {
  assert.ok(weftYaml, `weft.yaml is not among the manifests: ${manifests.join(" ")}`);
});

for (const manifest of manifests) {
  test(`${manifest} is valid`, async () => {
    const errors = await validateManifest(readFileSync(manifest, "utf8"), basename(manifest));
    assert.deepEqual(errors, [], `${manifest}:\n${errors.join("\n")}`);
  });
}

const text = weftYaml ? readFileSync(weftYaml, "utf8") : "";

// weft.yaml with `change` applied to the document of that kind and name (a yaml Document).
function edited(kind, name, change) {
  const docs = parseManifest(text);
  const doc = docs.find((d) => d.get("kind") === kind && d.getIn(["metadata", "name"]) === name);
  assert.ok(doc, `weft.yaml has no ${kind}/${name}`);
  change(doc);
  return docs.map(String).join("");
}

// The errors for `broken`, each checked to start "weft.yaml:LINE: ", returned without that.
async function errorsOf(broken) {
  const errors = await validateManifest(broken, "weft.yaml");
  for (const e of errors) assert.match(e, /^weft\.yaml:[0-9]+: /);
  return errors.map((e) => e.replace(/^weft\.yaml:[0-9]+: /, ""));
}

const container = ["spec", "template", "spec", "containers", 0];

test("a typo'd field is unknown, on its line", async () => {
  const broken = edited("StatefulSet", "weft-worker", (doc) => {
    doc.deleteIn(["spec", "replicas"]);
    doc.setIn(["spec", "replica"], 4);
  });
  const errors = await validateManifest(broken, "weft.yaml");
  const line = broken.split("\n").findIndex((l) => /^ +replica: 4$/.test(l)) + 1;
  assert.deepEqual(errors, [`weft.yaml:${line}: StatefulSet/weft-worker: spec.replica: unknown field`]);
});

test("a typo'd field deep in the pod template is unknown", async () => {
  const broken = edited("StatefulSet", "weft-coordinator", (doc) => {
    const mount = doc.getIn([...container, "volumeMounts", 0]);
    mount.set("mountpath", mount.get("mountPath"));
    mount.delete("mountPath");
  });
  assert.deepEqual(await errorsOf(broken), [
    "StatefulSet/weft-coordinator: spec.template.spec.containers[0].volumeMounts[0].mountPath: required field missing",
    "StatefulSet/weft-coordinator: spec.template.spec.containers[0].volumeMounts[0].mountpath: unknown field",
  ]);
});

test("a field of the wrong type", async () => {
  const broken = edited("StatefulSet", "weft-worker", (doc) => doc.setIn([...container, "ports", 0, "containerPort"], "abc"));
  assert.deepEqual(await errorsOf(broken), [
    'StatefulSet/weft-worker: spec.template.spec.containers[0].ports[0].containerPort: must be integer, not "abc"',
  ]);
});

test("a container without a name", async () => {
  const broken = edited("StatefulSet", "weft-worker-gpu", (doc) => doc.deleteIn([...container, "name"]));
  assert.deepEqual(await errorsOf(broken), [
    "StatefulSet/weft-worker-gpu: spec.template.spec.containers[0].name: required field missing",
  ]);
});

test("a value outside an enum", async () => {
  const broken = edited("StatefulSet", "weft-coordinator", (doc) => doc.setIn([...container, "imagePullPolicy"], "Sometimes"));
  assert.deepEqual(await errorsOf(broken), [
    'StatefulSet/weft-coordinator: spec.template.spec.containers[0].imagePullPolicy: "Sometimes" is not one of Always, IfNotPresent, Never',
  ]);
});

test("a malformed quantity", async () => {
  const broken = edited("StatefulSet", "weft-worker", (doc) => doc.setIn([...container, "resources", "requests", "memory"], "8Gigs"));
  assert.deepEqual(await errorsOf(broken), [
    'StatefulSet/weft-worker: spec.template.spec.containers[0].resources.requests.memory: "8Gigs" is not a valid quantity',
  ]);
});

test("an unknown kind and an unknown apiVersion", async () => {
  const kind = edited("Service", "weft-coordinator", (doc) => doc.set("kind", "Servise"));
  assert.deepEqual(await errorsOf(kind), ['Servise/weft-coordinator: kind: unknown kind "Servise" in apiVersion "v1"']);
  const apiVersion = edited("StatefulSet", "weft-worker", (doc) => doc.set("apiVersion", "apps/v2"));
  assert.deepEqual(await errorsOf(apiVersion), ['StatefulSet/weft-worker: apiVersion: unknown apiVersion "apps/v2"']);
});

test("YAML that does not parse, and a key given twice", async () => {
  const unclosed = `${text}---\nkind: [Service\n`;
  const line = unclosed.split("\n").length; // the end of the text, where the ] is missed
  assert.deepEqual(await validateManifest(unclosed, "weft.yaml"), [
    `weft.yaml:${line}: document 5: Flow sequence in block collection must be sufficiently indented and end with a ]`,
  ]);
  assert.deepEqual(await errorsOf(`${text}---\napiVersion: v1\napiVersion: v1\n`), ["document 5: Map keys must be unique"]);
});

test("a Service that selects no pod", async () => {
  const broken = edited("Service", "weft-coordinator", (doc) => doc.setIn(["spec", "selector", "app"], "weft-coord"));
  const errors = await errorsOf(broken);
  assert.equal(errors.length, 1);
  assert.match(errors[0], /^Service\/weft-coordinator: spec\.selector: app=weft-coord selects no pod of this file \(StatefulSet\/weft-coordinator \(app=weft-coordinator\), /);
});

test("a Service port that no container declares", async () => {
  const number = edited("Service", "weft-coordinator", (doc) => doc.setIn(["spec", "ports", 0, "targetPort"], 7071));
  assert.deepEqual(await errorsOf(number), [
    "Service/weft-coordinator: spec.ports[0].targetPort: no container of StatefulSet/weft-coordinator declares port 7071",
  ]);
  const name = edited("Service", "weft-coordinator", (doc) => doc.setIn(["spec", "ports", 0, "targetPort"], "rpc"));
  assert.deepEqual(await errorsOf(name), [
    'Service/weft-coordinator: spec.ports[0].targetPort: no container of StatefulSet/weft-coordinator declares port "rpc"',
  ]);
});

test("a Secret, or a key of one, that the header comment does not make", async () => {
  const secret = edited("StatefulSet", "weft-coordinator", (doc) => doc.setIn(["spec", "template", "spec", "volumes", 1, "secret", "secretName"], "weft-token"));
  assert.deepEqual(await errorsOf(secret), [
    'StatefulSet/weft-coordinator: spec.template.spec.volumes[1].secret.secretName: Secret "weft-token" is made neither by this file nor by a `kubectl create secret` in its header comment (made: weft-tokens, weft-tls)',
  ]);
  const key = edited("StatefulSet", "weft-worker", (doc) => doc.setIn(["spec", "template", "spec", "volumes", 2, "secret", "items", 0, "key"], "ca.pem"));
  assert.deepEqual(await errorsOf(key), [
    'StatefulSet/weft-worker: spec.template.spec.volumes[2].secret.items[0].key: Secret "weft-tls" has no key "ca.pem" (it has tls.crt, tls.key, ca.crt)',
  ]);
  // The same file, its header no longer making weft-tls: all three StatefulSets mount it.
  const header = text.replace("kubectl create secret generic weft-tls", "kubectl create secret generic weft-cert");
  assert.notEqual(header, text);
  const errors = await errorsOf(header);
  assert.equal(errors.length, 3);
  for (const e of errors) assert.match(e, /: spec\.template\.spec\.volumes\[2\]\.secret\.secretName: Secret "weft-tls" is made neither/);
});

test("a mount of a volume the pod lacks, a selector that misses the template", async () => {
  const mount = edited("StatefulSet", "weft-worker", (doc) => doc.setIn([...container, "volumeMounts", 0, "name"], "token"));
  assert.deepEqual(await errorsOf(mount), [
    'StatefulSet/weft-worker: spec.template.spec.containers[0].volumeMounts[0].name: no volume "token" in the pod (it has shared, tokens, tls)',
  ]);
  const selector = edited("StatefulSet", "weft-worker", (doc) => doc.setIn(["spec", "selector", "matchLabels", "app"], "weft-wroker"));
  assert.deepEqual(await errorsOf(selector), [
    "StatefulSet/weft-worker: spec.selector.matchLabels: app=weft-wroker does not select the pod template's labels (app=weft-worker)",
  ]);
});
