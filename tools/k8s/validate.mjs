// Validates a multi-document Kubernetes manifest: each document against the schema of its kind
// from kubernetes-models (Kubernetes' OpenAPI schemas compiled to validators, shipped in the
// package: nothing is fetched), then what a schema cannot say across documents (Services select
// pods of the file's workloads and reach their ports; Secrets are those the header comment makes).
//
// E.g.
//   const errors = await validateManifest(readFileSync(path, "utf8"), "weft.yaml");
//   // ["weft.yaml:84: StatefulSet/weft-worker: spec.replica: unknown field", ...]
//
// Each error reads FILE:LINE: KIND/NAME: PATH: what is wrong, PATH as kubectl writes it.
import { basename } from "node:path";
import { LineCounter, isMap, isScalar, isSeq, parseAllDocuments } from "yaml";

// The documents of a manifest as the yaml package's Documents (values, comments and positions).
// Kubernetes reads manifests as YAML 1.1 (sigs.k8s.io/yaml): `defaultMode: 0400` is octal 256
// and `readOnly: yes` is true there, so they are read the same way here.
export function parseManifest(text, lineCounter = undefined) {
  return parseAllDocuments(text, { version: "1.1", lineCounter });
}

export async function validateManifest(text, file) {
  const lineCounter = new LineCounter();
  const errors = [];
  const report = (offset, what, message) => {
    errors.push({ offset, text: `${file}:${lineCounter.linePos(offset).line}: ${what}${message}` });
  };
  const reportIn = (doc, { path, message }) => {
    report(doc.offsetOf(path), `${doc.id}: `, path.length ? `${pathText(path)}: ${message}` : message);
  };

  const docs = [];
  parseManifest(text, lineCounter).forEach((yamlDoc, i) => {
    for (const e of yamlDoc.errors) report(e.pos[0], "", `document ${i + 1}: ${firstLine(e.message)}`);
    if (yamlDoc.errors.length) return;
    const doc = new ManifestDocument(yamlDoc, i + 1);
    if (doc.value === null || doc.value === undefined) return; // an empty document, as kubectl skips
    if (!isPlainObject(doc.value)) {
      report(yamlDoc.contents.range[0], "", `document ${i + 1}: not a mapping`);
      return;
    }
    docs.push(doc);
  });

  for (const doc of docs) {
    for (const e of await doc.schemaErrors()) reportIn(doc, e);
    for (const e of doc.podErrors()) reportIn(doc, e);
  }
  for (const e of crossDocumentErrors(docs, headerComment(text))) reportIn(e.doc, e);
  return errors.sort((a, b) => a.offset - b.offset).map((e) => e.text);
}

// One document of the stream: its value as plain data, and its YAML nodes for line numbers.
class ManifestDocument {
  constructor(yamlDoc, number) {
    this.yamlDoc = yamlDoc;
    this.value = yamlDoc.toJS();
    const { kind, metadata } = this.value ?? {};
    this.id = typeof kind === "string" ? `${kind}/${metadata?.name ?? "(no name)"}` : `document ${number}`;
  }

  // Where the field at `path` (keys and indices) starts, or its nearest ancestor that exists.
  offsetOf(path) {
    let node = this.yamlDoc.contents;
    let offset = node.range[0];
    for (const segment of path) {
      if (isMap(node)) {
        const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === String(segment));
        if (!pair) break;
        offset = pair.key.range[0];
        node = pair.value;
      } else if (isSeq(node) && node.items[segment]) {
        node = node.items[segment];
        offset = node.range[0];
      } else {
        break;
      }
    }
    return offset;
  }

  // Errors against the schema of the document's apiVersion and kind: [{path, message}].
  async schemaErrors() {
    const { model, error } = await modelOf(this.value.apiVersion, this.value.kind);
    if (error) return [error];
    const errors = validate(model, this.value).map((group) => ({
      path: group.path,
      message: describeSchemaError(group, valueAt(this.value, group.path)),
    }));
    for (const path of unknownFields(model, this.value)) errors.push({ path, message: "unknown field" });
    return errors;
  }

  // The pod this document runs (a Pod's own, a workload's template): {labels, spec, path}.
  pod() {
    const v = this.value;
    if (v.kind === "Pod") return { labels: v.metadata?.labels, spec: v.spec, path: ["spec"] };
    if (v.kind === "CronJob") {
      const t = v.spec?.jobTemplate?.spec?.template;
      return t && { labels: t.metadata?.labels, spec: t.spec, path: ["spec", "jobTemplate", "spec", "template", "spec"] };
    }
    const t = v.spec?.template;
    return t && { labels: t.metadata?.labels, spec: t.spec, path: ["spec", "template", "spec"] };
  }

  // What the API server rejects within one pod-running document and no schema says: a workload
  // whose selector misses its own pods, a mount of a volume the pod does not have.
  podErrors() {
    const pod = this.pod();
    if (!pod?.spec) return [];
    const errors = [];
    const matchLabels = this.value.spec?.selector?.matchLabels;
    if (this.value.kind !== "Pod" && isPlainObject(matchLabels) && !selects(matchLabels, pod.labels)) {
      const path = ["spec", "selector", "matchLabels"];
      errors.push({ path, message: `${labelsText(matchLabels)} does not select the pod template's labels (${labelsText(pod.labels)})` });
    }
    const volumes = [
      ...(pod.spec.volumes ?? []).map((v) => v?.name),
      ...(this.value.spec?.volumeClaimTemplates ?? []).map((c) => c?.metadata?.name),
    ];
    for (const [c, container] of containersOf(pod.spec)) {
      (container.volumeMounts ?? []).forEach((mount, m) => {
        if (!mount?.name || volumes.includes(mount.name)) return;
        const path = [...pod.path, ...c, "volumeMounts", m, "name"];
        errors.push({ path, message: `no volume "${mount.name}" in the pod (it has ${volumes.join(", ") || "none"})` });
      });
    }
    return errors;
  }
}

// {model}: the model class of apiVersion and kind, or {error} saying why there is none.
async function modelOf(apiVersion, kind) {
  for (const [field, value] of [["apiVersion", apiVersion], ["kind", kind]]) {
    if (typeof value !== "string") return { error: { path: [field], message: "required field missing" } };
  }
  const unknownVersion = { error: { path: ["apiVersion"], message: `unknown apiVersion "${apiVersion}"` } };
  // "v1" is the core group, "apps/v1" the group apps: kubernetes-models/v1, kubernetes-models/apps/v1.
  if (!/^([a-z0-9.-]+\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion)) return unknownVersion;
  let group;
  try {
    group = await import(`kubernetes-models/${apiVersion}`);
  } catch (e) {
    if (e.code === "ERR_PACKAGE_PATH_NOT_EXPORTED" || e.code === "ERR_MODULE_NOT_FOUND") return unknownVersion;
    throw e;
  }
  // A group exports every type of its schemas; only top-level kinds carry apiVersion and kind.
  const model = Object.hasOwn(group, kind) ? group[kind] : undefined;
  if (typeof model !== "function" || model.kind !== kind || model.apiVersion !== apiVersion) {
    return { error: { path: ["kind"], message: `unknown kind "${kind}" in apiVersion "${apiVersion}"` } };
  }
  return { model };
}

// The schema's errors for `value`, grouped by the field they are about: [{path, errors}].
function validate(model, value) {
  try {
    new model(value).validate();
    return [];
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    const groups = new Map();
    for (const error of e.errors) {
      const path = pointerPath(error.instancePath);
      if (error.keyword === "required") path.push(error.params.missingProperty);
      const key = JSON.stringify(path);
      if (!groups.has(key)) groups.set(key, { path, errors: [] });
      groups.get(key).errors.push(error);
    }
    return [...groups.values()];
  }
}

// A field is one the schema knows if its validator looks at it: the compiled validators check
// each property they define and pass over the rest (Kubernetes' schemas leave
// additionalProperties open, which is why the package alone accepts `spec.replica`). So each
// object's fields are replaced with a value no schema accepts, and the fields that draw no error
// are unknown. A map (labels, resources.requests) checks every key, so its keys count as known.
const NO_SCHEMA_ACCEPTS = Symbol("probe");

function unknownFields(model, root) {
  const unknown = [];
  const visit = (node, path) => {
    if (Array.isArray(node)) {
      node.forEach((item, i) => visit(item, [...path, i]));
      return;
    }
    if (!isPlainObject(node) || Object.keys(node).length === 0) return;
    const probe = Object.fromEntries(Object.keys(node).map((k) => [k, NO_SCHEMA_ACCEPTS]));
    const checked = new Set();
    for (const group of validate(model, replaceAt(root, path, probe))) {
      if (group.path.length > path.length && path.every((s, i) => String(group.path[i]) === String(s))) {
        checked.add(String(group.path[path.length]));
      }
    }
    for (const key of Object.keys(node)) {
      if (checked.has(key)) visit(node[key], [...path, key]);
      else unknown.push([...path, key]);
    }
  };
  visit(root, []);
  return unknown;
}

// What is wrong with the field of a group of schema errors, said once.
function describeSchemaError({ errors }, value) {
  if (errors.some((e) => e.keyword === "required")) return "required field missing";
  const enumError = errors.find((e) => e.keyword === "enum");
  if (enumError) return `${JSON.stringify(value)} is not one of ${enumError.params.allowedValues.join(", ")}`;
  // A quantity ("8Gi") is a string of a format or a number: a bad string fails both branches.
  const format = errors.find((e) => e.keyword === "format");
  if (format) return `${JSON.stringify(value)} is not a valid ${format.params.format}`;
  // An int-or-string field fails each branch of a oneOf: say which types would do.
  const types = errors.filter((e) => e.keyword === "type").map((e) => e.params.type);
  if (types.length) return `must be ${types.join(" or ")}, not ${JSON.stringify(value)}`;
  const messages = errors.filter((e) => e.keyword !== "oneOf" && e.keyword !== "anyOf").map((e) => e.message);
  return `${(messages.length ? messages : errors.map((e) => e.message)).join("; ")} (${JSON.stringify(value)})`;
}

// What the file's documents say to each other: every Service selects pods of a workload in the
// file and each of its ports reaches a port those pods declare; every Secret a pod uses, and
// each key it reads, is made by the file or by a `kubectl create secret` in its header comment.
function crossDocumentErrors(docs, header) {
  const errors = [];
  const secrets = secretsMadeBy(docs, header);
  const workloads = docs.filter((d) => d.pod()?.spec);

  for (const service of docs.filter((d) => d.value.kind === "Service")) {
    const selector = service.value.spec?.selector;
    if (!isPlainObject(selector) || Object.keys(selector).length === 0) continue; // endpoints made by hand
    const selected = workloads.filter((w) => selects(selector, w.pod().labels));
    if (selected.length === 0) {
      const path = ["spec", "selector"];
      const labels = workloads.map((w) => `${w.id} (${labelsText(w.pod().labels)})`).join(", ");
      errors.push({ doc: service, path, message: `${labelsText(selector)} selects no pod of this file (${labels || "no workloads"})` });
      continue;
    }
    (service.value.spec?.ports ?? []).forEach((port, p) => {
      const target = port?.targetPort ?? port?.port;
      const field = port?.targetPort === undefined ? "port" : "targetPort";
      const declares = (w) => [...containersOf(w.pod().spec)].some(([, c]) =>
        (c.ports ?? []).some((cp) => (typeof target === "string" ? cp?.name === target : cp?.containerPort === target)));
      if (target === undefined || selected.some(declares)) return;
      const path = ["spec", "ports", p, field];
      errors.push({ doc: service, path, message: `no container of ${selected.map((w) => w.id).join(", ")} declares port ${JSON.stringify(target)}` });
    });
  }

  for (const doc of workloads) {
    for (const use of secretUses(doc)) {
      const keys = secrets.get(use.name);
      if (!keys) {
        errors.push({ doc, path: use.path, message: `Secret "${use.name}" is made neither by this file nor by a \`kubectl create secret\` in its header comment (made: ${[...secrets.keys()].join(", ") || "none"})` });
        continue;
      }
      if (keys === ANY_KEY) continue;
      for (const { key, path } of use.keys) {
        if (!keys.has(key)) {
          errors.push({ doc, path, message: `Secret "${use.name}" has no key "${key}" (it has ${[...keys].join(", ")})` });
        }
      }
    }
  }
  return errors;
}

const ANY_KEY = "any key";

// Secret name -> the set of its keys (or ANY_KEY where the keys cannot be told): from the file's
// Secret documents and the `kubectl create secret generic|tls` commands of its header comment.
function secretsMadeBy(docs, header) {
  const secrets = new Map();
  for (const d of docs.filter((d) => d.value.kind === "Secret" && d.value.metadata?.name)) {
    secrets.set(d.value.metadata.name, new Set([...Object.keys(d.value.data ?? {}), ...Object.keys(d.value.stringData ?? {})]));
  }
  for (const command of header.matchAll(/kubectl\s+create\s+secret\s+(generic|tls)\s+([^\n]*)/g)) {
    const words = command[2].split(/\s+/);
    const name = words.find((w) => w && !w.startsWith("-"));
    if (!name) continue;
    if (command[1] === "tls") {
      secrets.set(name, new Set(["tls.crt", "tls.key"]));
      continue;
    }
    let keys = new Set();
    for (const w of words) {
      const literal = w.match(/^--from-literal=([^=]+)=/);
      const file = w.match(/^--from-file=(?:([^=]+)=)?(.+)$/);
      if (literal) keys.add(literal[1]);
      else if (file) keys.add(file[1] ?? basename(file[2]));
      else if (w.startsWith("--from-env-file") || /^--from-file=.*\/$/.test(w)) keys = ANY_KEY;
      if (keys === ANY_KEY) break;
    }
    secrets.set(name, keys);
  }
  return secrets;
}

// Each Secret the document's pod reads, where, and the keys it names: [{name, path, keys}].
function secretUses(doc) {
  const { spec, path: podPath } = doc.pod();
  const uses = [];
  const itemKeys = (items, path) => (items ?? []).map((item, i) => ({ key: item?.key, path: [...path, "items", i, "key"] }));
  (spec.volumes ?? []).forEach((volume, v) => {
    const secret = volume?.secret;
    if (secret?.secretName && !secret.optional) {
      const path = [...podPath, "volumes", v, "secret"];
      uses.push({ name: secret.secretName, path: [...path, "secretName"], keys: itemKeys(secret.items, path) });
    }
    (volume?.projected?.sources ?? []).forEach((source, s) => {
      if (!source?.secret?.name || source.secret.optional) return;
      const path = [...podPath, "volumes", v, "projected", "sources", s, "secret"];
      uses.push({ name: source.secret.name, path: [...path, "name"], keys: itemKeys(source.secret.items, path) });
    });
  });
  for (const [c, container] of containersOf(spec)) {
    (container.env ?? []).forEach((env, e) => {
      const ref = env?.valueFrom?.secretKeyRef;
      if (!ref?.name || ref.optional) return;
      const path = [...podPath, ...c, "env", e, "valueFrom", "secretKeyRef"];
      uses.push({ name: ref.name, path: [...path, "name"], keys: [{ key: ref.key, path: [...path, "key"] }] });
    });
    (container.envFrom ?? []).forEach((from, f) => {
      if (!from?.secretRef?.name || from.secretRef.optional) return;
      uses.push({ name: from.secretRef.name, path: [...podPath, ...c, "envFrom", f, "secretRef", "name"], keys: [] });
    });
  }
  (spec.imagePullSecrets ?? []).forEach((ref, r) => {
    if (ref?.name) uses.push({ name: ref.name, path: [...podPath, "imagePullSecrets", r, "name"], keys: [] });
  });
  return uses;
}

// The comment lines that open the file, without their '#', shell line continuations joined.
function headerComment(text) {
  const lines = [];
  for (const line of text.split("\n")) {
    if (!line.startsWith("#")) break;
    lines.push(line.replace(/^#\s?/, ""));
  }
  return lines.join("\n").replace(/\\\n\s*/g, " ");
}

// [path relative to the pod spec, container] of each init and app container.
function* containersOf(podSpec) {
  for (const list of ["initContainers", "containers"]) {
    for (const [i, container] of (podSpec?.[list] ?? []).entries()) {
      if (isPlainObject(container)) yield [[list, i], container];
    }
  }
}

function selects(selector, labels) {
  return Object.entries(selector).every(([k, v]) => isPlainObject(labels) && labels[k] === v);
}

function labelsText(labels) {
  if (!isPlainObject(labels) || Object.keys(labels).length === 0) return "no labels";
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(",");
}

function isPlainObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// A JSON pointer (ajv's instancePath) as path segments.
function pointerPath(pointer) {
  return pointer.split("/").slice(1).map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function valueAt(root, path) {
  return path.reduce((node, segment) => node?.[segment], root);
}

// A copy of `root` with the node at `path` replaced; what it shares with `root` is not changed.
function replaceAt(root, path, replacement) {
  if (path.length === 0) return replacement;
  const [head, ...rest] = path;
  const copy = Array.isArray(root) ? [...root] : { ...root };
  copy[head] = replaceAt(root[head], rest, replacement);
  return copy;
}

// `spec.template.spec.containers[0].ports[1]`, `metadata.annotations["prometheus.io/port"]`.
function pathText(path) {
  let text = "";
  for (const segment of path) {
    const s = String(segment);
    if (/^[0-9]+$/.test(s)) text += `[${s}]`;
    else if (/^[A-Za-z_$][A-Za-z0-9_$-]*$/.test(s)) text += text ? `.${s}` : s;
    else text += `[${JSON.stringify(s)}]`;
  }
  return text;
}

// The parser's message without the code excerpt and the position, which the report gives.
function firstLine(message) {
  return message.split("\n")[0].replace(/ at line \d+, column \d+:?$/, "");
}
