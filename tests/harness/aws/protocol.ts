import { Buffer } from "node:buffer";
import * as dynamodb from "@aws-sdk/client-dynamodb";
import * as ec2 from "@aws-sdk/client-ec2";
import * as eventbridge from "@aws-sdk/client-eventbridge";
import * as lambda from "@aws-sdk/client-lambda";
import * as scheduler from "@aws-sdk/client-scheduler";
import * as servicequotas from "@aws-sdk/client-service-quotas";
import * as sfn from "@aws-sdk/client-sfn";
import * as ssm from "@aws-sdk/client-ssm";
import { JsonShapeDeserializer2, JsonShapeSerializer2 } from "@smithy/core/protocols";
import { NormalizedSchema, TypeRegistry, translateTraits } from "@smithy/core/schema";
import type { Schema } from "@smithy/types";
import { AwsError, signatureScope } from "./core.ts";

/**
 * The AWS double's wire protocols. Every SDK client of the code under test reaches the double on one endpoint
 * (`AWS_ENDPOINT_URL`), so a request is told apart by the signing name in its SigV4 credential scope, as AWS's
 * endpoints are told apart by host name. Requests are decoded, and outputs and errors encoded, from the operation
 * schemas the SDK's own command classes carry (`new XCommand({}).schema`: `[9, namespace, name, traits, input,
 * output]`), walked with `NormalizedSchema`, so any operation of a listed client works, not only the ones labfleet
 * calls today. JSON bodies go through the SDK's own JSON codec (`JsonShapeSerializer2`/`JsonShapeDeserializer2`)
 * with the settings its protocols use; the EC2 query form, EC2's XML and the REST HTTP bindings are written here,
 * key for key as the SDK's serializers write and its deserializers read them.
 */

export interface RawRequest {
  method: string;
  /** The URL path, still percent-encoded. */
  path: string;
  query: URLSearchParams;
  /** Header names in lower case, as Node gives them. */
  headers: Record<string, string | undefined>;
  body: Buffer;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string | Buffer;
}

export interface DecodedRequest {
  /** The signing name (`ec2`, `ssm`, ...); told from the request itself when unsigned; `""` when it cannot be. */
  service: string;
  /** The operation, or undefined when the service has no such operation (or the service is not one listed here). */
  operation: string | undefined;
  /** What the request asked for, known or not: the EC2 Action, the X-Amz-Target operation, or `METHOD /path`. */
  requested: string | undefined;
  accessKeyId: string | undefined;
  region: string | undefined;
  /**
   * The input, as the SDK command was given it. Lambda Invoke's `Payload` is the raw body (a Buffer). Members
   * the SDK fills itself (idempotency tokens such as `ClientToken`) are present even when the caller left them out.
   */
  input: Record<string, unknown>;
}

export type Protocol = "ec2Query" | "awsJson1_0" | "awsJson1_1" | "restJson1";

interface Service {
  protocol: Protocol;
  /** The SDK client package: its `XCommand` classes carry the operation schemas. */
  sdk: Record<string, unknown>;
  /** The Smithy namespace of the service's shapes; its errors are registered under it. */
  namespace: string;
  /** awsJson: the X-Amz-Target prefix, from the client's `protocolSettings.serviceTarget`. */
  target?: string;
}

/** Signing name -> protocol, as each client's runtime config (`protocol`, `protocolSettings`) declares it. */
const SERVICES: Record<string, Service> = {
  ec2: { protocol: "ec2Query", sdk: ec2, namespace: "com.amazonaws.ec2" },
  ssm: { protocol: "awsJson1_1", sdk: ssm, namespace: "com.amazonaws.ssm", target: "AmazonSSM" },
  servicequotas: {
    protocol: "awsJson1_1",
    sdk: servicequotas,
    namespace: "com.amazonaws.servicequotas",
    target: "ServiceQuotasV20190624",
  },
  events: {
    protocol: "awsJson1_1",
    sdk: eventbridge,
    namespace: "com.amazonaws.eventbridge",
    target: "AWSEvents",
  },
  states: { protocol: "awsJson1_0", sdk: sfn, namespace: "com.amazonaws.sfn", target: "AWSStepFunctions" },
  dynamodb: {
    protocol: "awsJson1_0",
    sdk: dynamodb,
    namespace: "com.amazonaws.dynamodb",
    target: "DynamoDB_20120810",
  },
  scheduler: { protocol: "restJson1", sdk: scheduler, namespace: "com.amazonaws.scheduler" },
  lambda: { protocol: "restJson1", sdk: lambda, namespace: "com.amazonaws.lambda" },
};

/** EC2's API version and the namespace of its XML responses (with the trailing slash EC2 sends). */
const EC2_VERSION = "2016-11-15";
const EC2_XMLNS = `http://ec2.amazonaws.com/doc/${EC2_VERSION}/`;

/** The protocol a signing name speaks, or undefined for a service the double does not know. */
export function serviceProtocol(service: string): Protocol | undefined {
  return SERVICES[service]?.protocol;
}

// ---------------------------------------------------------------------------------------------------------------
// Operations, from the SDK's command classes

type Segment = { literal: string } | { label: string; greedy: boolean };

interface Operation {
  name: string;
  inputRef: Schema;
  outputRef: Schema;
  input: NormalizedSchema;
  output: NormalizedSchema;
  /** restJson1: the `http` trait, `[method, uri, code]`, split into what a route match needs. */
  http?: { method: string; segments: Segment[]; query: [string, string][]; code: number };
}

const operations = new Map<string, Map<string, Operation | null>>();

function operationOf(service: string, name: string): Operation | undefined {
  const spec = SERVICES[service];
  if (!spec || !/^[A-Z][A-Za-z0-9]*$/.test(name)) return undefined;
  let cache = operations.get(service);
  if (!cache) {
    cache = new Map();
    operations.set(service, cache);
  }
  const cached = cache.get(name);
  if (cached !== undefined) return cached ?? undefined;
  const Command = Object.hasOwn(spec.sdk, `${name}Command`) ? spec.sdk[`${name}Command`] : undefined;
  let op: Operation | null = null;
  if (typeof Command === "function") {
    const schema: unknown = new (Command as new (input: object) => { schema?: unknown })({}).schema;
    if (Array.isArray(schema) && schema[0] === 9) op = toOperation(schema);
  }
  cache.set(name, op);
  return op ?? undefined;
}

function toOperation(schema: unknown[]): Operation {
  const [, , name, traits, inputRef, outputRef] = schema as [9, string, string, unknown, Schema, Schema];
  const op: Operation = {
    name,
    inputRef,
    outputRef,
    input: NormalizedSchema.of(inputRef),
    output: NormalizedSchema.of(outputRef),
  };
  const http = translateTraits((traits ?? 0) as Parameters<typeof translateTraits>[0]).http;
  if (http) {
    const [path = "/", search] = http[1].split("?");
    const segments: Segment[] = path
      .split("/")
      .slice(1)
      .map((s) => {
        const m = /^\{([^{}+]+)(\+)?\}$/.exec(s);
        return m ? { label: m[1] as string, greedy: Boolean(m[2]) } : { literal: s };
      });
    op.http = { method: http[0], segments, query: [...new URLSearchParams(search ?? "")], code: http[2] };
  }
  return op;
}

const routes = new Map<string, Operation[]>();

/** A REST service's operations, most specific route first (more literal segments, then more static query keys). */
function routesOf(service: string): Operation[] {
  let list = routes.get(service);
  if (list) return list;
  const spec = SERVICES[service];
  list = [];
  for (const key of Object.keys(spec?.sdk ?? {})) {
    const m = /^([A-Z][A-Za-z0-9]*)Command$/.exec(key);
    const op = m ? operationOf(service, m[1] as string) : undefined;
    if (op?.http) list.push(op);
  }
  const literals = (op: Operation) => op.http?.segments.filter((s) => "literal" in s).length ?? 0;
  list.sort((a, b) => literals(b) - literals(a) || (b.http?.query.length ?? 0) - (a.http?.query.length ?? 0));
  routes.set(service, list);
  return list;
}

function matchRoute(op: Operation, req: RawRequest): Record<string, string> | undefined {
  const http = op.http;
  if (!http || http.method !== req.method.toUpperCase()) return undefined;
  for (const [k, v] of http.query)
    if (!req.query.has(k) || (v !== "" && req.query.get(k) !== v)) return undefined;
  const parts = req.path.split("/").slice(1);
  const labels: Record<string, string> = {};
  try {
    for (let i = 0; i < http.segments.length; i++) {
      const seg = http.segments[i] as Segment;
      if ("literal" in seg) {
        if (parts[i] !== seg.literal) return undefined;
      } else if (seg.greedy) {
        const rest = parts.slice(i);
        if (!rest.length || rest.join("") === "") return undefined;
        labels[seg.label] = rest.map(decodeURIComponent).join("/");
        return labels;
      } else {
        const part = parts[i];
        if (!part) return undefined;
        labels[seg.label] = decodeURIComponent(part);
      }
    }
  } catch {
    return undefined; // a malformed percent-escape matches no route
  }
  return parts.length === http.segments.length ? labels : undefined;
}

// ---------------------------------------------------------------------------------------------------------------
// Requests

/**
 * Tells a request's service (signing name), operation and caller, and decodes its input. Throws an AwsError
 * `SerializationException` for a JSON body that is not a JSON object (the SDK never sends one).
 */
export function decodeRequest(req: RawRequest): DecodedRequest {
  const headers = lowerCase(req.headers);
  const scope = signatureScope(headers.authorization);
  const service = scope?.service ?? unsignedService(req, headers);
  const base = { service, accessKeyId: scope?.accessKeyId, region: scope?.region };
  const spec = SERVICES[service];
  if (spec?.protocol === "ec2Query") {
    const params = new URLSearchParams(req.query);
    for (const [k, v] of new URLSearchParams(req.body.toString("utf8"))) params.append(k, v);
    const action = params.get("Action") ?? undefined;
    const op = action ? operationOf(service, action) : undefined;
    const input = op ? (readQuery(op.input, queryTree(params)) as Record<string, unknown>) : {};
    return { ...base, operation: op?.name, requested: action, input };
  }
  if (spec?.protocol === "awsJson1_0" || spec?.protocol === "awsJson1_1") {
    const target = headers["x-amz-target"] ?? "";
    const dot = target.lastIndexOf(".");
    const requested = dot > 0 ? target.slice(dot + 1) : undefined;
    const op =
      requested && target.slice(0, dot) === spec.target ? operationOf(service, requested) : undefined;
    if (!op) return { ...base, operation: undefined, requested, input: {} };
    const input = readJson(op.inputRef, jsonObject(req.body), false) as Record<string, unknown>;
    return { ...base, operation: op.name, requested, input };
  }
  if (spec?.protocol === "restJson1") {
    const requested = `${req.method.toUpperCase()} ${req.path}`;
    for (const op of routesOf(service)) {
      const labels = matchRoute(op, req);
      if (labels)
        return { ...base, operation: op.name, requested, input: readRest(op, req, headers, labels) };
    }
    return { ...base, operation: undefined, requested, input: {} };
  }
  return { ...base, operation: undefined, requested: undefined, input: {} };
}

/** The service of an unsigned request, from what its protocol puts in it (target prefix, EC2 version, route). */
function unsignedService(req: RawRequest, headers: Record<string, string | undefined>): string {
  const prefix = headers["x-amz-target"]?.split(".")[0];
  for (const [name, spec] of Object.entries(SERVICES)) {
    if (prefix && spec.target === prefix) return name;
  }
  const form = new URLSearchParams(
    req.method.toUpperCase() === "GET" ? req.query : req.body.toString("utf8"),
  );
  if (form.has("Action") && form.get("Version") === EC2_VERSION) return "ec2";
  for (const [name, spec] of Object.entries(SERVICES)) {
    if (spec.protocol === "restJson1" && routesOf(name).some((op) => matchRoute(op, req))) return name;
  }
  return "";
}

function lowerCase(headers: Record<string, string | undefined>): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(headers)) out[k.toLowerCase()] = v;
  return out;
}

function parseJson(body: Buffer): unknown {
  if (body.length === 0) return {};
  try {
    return JSON.parse(body.toString("utf8"));
  } catch {
    throw new AwsError("SerializationException", "The request body is not valid JSON.");
  }
}

function jsonObject(body: Buffer): Record<string, unknown> {
  const value = parseJson(body);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new AwsError("SerializationException", "The request body is not a JSON object.");
  }
  return value as Record<string, unknown>;
}

// The JSON codec with the settings of the SDK's JSON protocols: timestamps as epoch seconds unless a member's
// timestampFormat trait says otherwise; restJson1 honours jsonName, awsJson does not.
function jsonSettings(jsonName: boolean) {
  return { timestampFormat: { useTrait: true, default: 7 as const }, jsonName };
}

function readJson(ref: Schema, value: unknown, jsonName: boolean): unknown {
  if (NormalizedSchema.of(ref).isUnitSchema()) return {};
  return new JsonShapeDeserializer2(jsonSettings(jsonName)).readObject(ref, value as never);
}

function writeJson(ref: Schema, value: unknown, jsonName: boolean): Buffer {
  const serializer = new JsonShapeSerializer2(jsonSettings(jsonName));
  serializer.write(ref, value ?? {});
  const bytes = serializer.flush();
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

// EC2 query: `Action=X&Version=2016-11-15&Filter.1.Name=..&Filter.1.Value.1=..`. Lists are flattened and
// 1-indexed; a structure member's key is its ec2QueryName, else its xmlName capitalized, else its name
// capitalized (Smithy's ec2Query "Query key resolution"); empty lists are not sent.

interface QueryNode {
  value?: string;
  children: Map<string, QueryNode>;
}

function queryTree(params: URLSearchParams): QueryNode {
  const root: QueryNode = { children: new Map() };
  for (const [key, value] of params) {
    let node = root;
    for (const part of key.split(".")) {
      let child = node.children.get(part);
      if (!child) {
        child = { children: new Map() };
        node.children.set(part, child);
      }
      node = child;
    }
    node.value = value;
  }
  return root;
}

function queryKey(name: string, member: NormalizedSchema): string {
  const t = member.getMergedTraits();
  if (typeof t.ec2QueryName === "string") return t.ec2QueryName;
  const key = t.xmlName ?? name;
  return key.charAt(0).toUpperCase() + key.slice(1);
}

/** The numbered children of a query node (`X.1`, `X.2`, ...), in order. */
function numbered(node: QueryNode | undefined): QueryNode[] {
  if (!node) return [];
  return [...node.children.entries()]
    .filter(([k]) => /^\d+$/.test(k))
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([, v]) => v);
}

function readQuery(ns: NormalizedSchema, node: QueryNode): unknown {
  if (ns.isStructSchema()) {
    const out: Record<string, unknown> = {};
    for (const [name, member] of ns.structIterator()) {
      const child = node.children.get(queryKey(name, member));
      const value = child ? readQuery(member, child) : undefined;
      if (value !== undefined) out[name] = value;
    }
    return out;
  }
  if (ns.isListSchema()) return numbered(node).map((item) => readQuery(ns.getValueSchema(), item));
  if (ns.isMapSchema()) {
    const keyNs = ns.getKeySchema();
    const valueNs = ns.getValueSchema();
    const keyName = keyNs.getMergedTraits().ec2QueryName ?? keyNs.getMergedTraits().xmlName ?? "key";
    const valueName = valueNs.getMergedTraits().ec2QueryName ?? valueNs.getMergedTraits().xmlName ?? "value";
    const entries = ns.getMergedTraits().xmlFlattened ? numbered(node) : numbered(node.children.get("entry"));
    const out: Record<string, unknown> = {};
    for (const entry of entries) {
      const k = entry.children.get(String(keyName))?.value;
      const v = entry.children.get(String(valueName));
      if (k !== undefined && v) out[k] = readQuery(valueNs, v);
    }
    return out;
  }
  return node.value === undefined ? undefined : fromString(ns, node.value, "query");
}

// restJson1: labels, query strings, headers and payload per the members' HTTP binding traits; the other members
// are the JSON body.

function readRest(
  op: Operation,
  req: RawRequest,
  headers: Record<string, string | undefined>,
  labels: Record<string, string>,
): Record<string, unknown> {
  const input: Record<string, unknown> = {};
  const bodyMembers: string[] = [];
  const boundQuery = new Set<string>();
  for (const [, member] of op.input.structIterator()) {
    const q = member.getMergedTraits().httpQuery;
    if (q) boundQuery.add(q);
  }
  for (const [name, member] of op.input.structIterator()) {
    const t = member.getMergedTraits();
    if (t.httpLabel) {
      const v = labels[name];
      if (v !== undefined) input[name] = fromString(member, v, "label");
    } else if (t.httpQuery) {
      const values = req.query.getAll(t.httpQuery);
      if (values.length) {
        input[name] = member.isListSchema()
          ? values.map((v) => fromString(member.getValueSchema(), v, "query"))
          : fromString(member, values[0] as string, "query");
      }
    } else if (t.httpQueryParams) {
      const valueNs = member.getValueSchema();
      const map: Record<string, unknown> = {};
      for (const key of new Set(req.query.keys())) {
        if (boundQuery.has(key)) continue;
        const values = req.query.getAll(key);
        map[key] = valueNs.isListSchema()
          ? values.map((v) => fromString(valueNs.getValueSchema(), v, "query"))
          : fromString(valueNs, values[0] as string, "query");
      }
      if (Object.keys(map).length) input[name] = map;
    } else if (t.httpHeader) {
      const v = headers[t.httpHeader.toLowerCase()];
      if (v !== undefined) input[name] = readHeader(member, v);
    } else if (typeof t.httpPrefixHeaders === "string") {
      const prefix = t.httpPrefixHeaders.toLowerCase();
      const map: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(headers)) {
        if (k.startsWith(prefix) && v !== undefined)
          map[k.slice(prefix.length)] = readHeader(member.getValueSchema(), v);
      }
      if (Object.keys(map).length) input[name] = map;
    } else if (t.httpPayload) {
      if (member.isBlobSchema()) {
        if (req.body.length) input[name] = req.body;
      } else if (member.isStringSchema()) {
        if (req.body.length) input[name] = req.body.toString("utf8");
      } else if (req.body.length) {
        input[name] = readJson(member, parseJson(req.body), true);
      }
    } else {
      bodyMembers.push(name);
    }
  }
  if (bodyMembers.length && req.body.length) {
    Object.assign(input, readJson(bodySchema(op.input, bodyMembers), jsonObject(req.body), true));
  }
  return input;
}

/** A structure of just some of a structure's members, as the SDK builds for the body of a REST message. */
function bodySchema(ns: NormalizedSchema, names: string[]): Schema {
  const source = ns.getSchema() as unknown as [number, string, string, unknown, string[], unknown[]];
  const schemas = names.map((n) => source[5][source[4].indexOf(n)]);
  return [3, source[1], source[2], 0, names, schemas] as unknown as Schema;
}

function readHeader(ns: NormalizedSchema, value: string): unknown {
  if (!ns.isListSchema()) return fromString(ns, value, "header");
  const item = ns.getValueSchema();
  let parts = splitHeader(value);
  // An HTTP date holds a comma itself ("Mon, 01 Jan 2024 ..."): a list of them is split at every second comma.
  if (item.isTimestampSchema() && timestampFormat(item, "header") === 6) {
    const pairs: string[] = [];
    for (let i = 0; i < parts.length; i += 2) pairs.push(`${parts[i]}, ${parts[i + 1] ?? ""}`.trim());
    parts = pairs;
  }
  return parts.map((p) => fromString(item, p, "header"));
}

function splitHeader(value: string): string[] {
  const out: string[] = [];
  let current = "";
  let quoted = false;
  for (let i = 0; i < value.length; i++) {
    const c = value[i] as string;
    if (c === '"' && value[i - 1] !== "\\") quoted = !quoted;
    else if (c === "," && !quoted) {
      out.push(current.trim());
      current = "";
    } else current += c === "\\" && quoted ? "" : c;
  }
  out.push(current.trim());
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Scalars in strings (query values, labels, headers, XML text)

type Location = "query" | "label" | "header";

/**
 * A timestamp's wire format: the member's timestampFormat trait, else the location's default (Smithy: `http-date`
 * in headers, `date-time` in query strings, labels and XML). 5 = date-time, 6 = http-date, 7 = epoch-seconds.
 */
function timestampFormat(ns: NormalizedSchema, location: Location): 5 | 6 | 7 {
  const raw = ns.getSchema();
  if (raw === 5 || raw === 6 || raw === 7) return raw;
  return location === "header" ? 6 : 5;
}

function fromString(ns: NormalizedSchema, s: string, location: Location): unknown {
  if (ns.isBlobSchema()) return new Uint8Array(Buffer.from(s, "base64"));
  if (ns.isTimestampSchema()) {
    return timestampFormat(ns, location) === 7 ? new Date(Number(s) * 1000) : new Date(s);
  }
  if (ns.isBooleanSchema()) return s.toLowerCase() === "true";
  if (ns.isNumericSchema()) return Number(s);
  if (ns.isBigIntegerSchema()) return BigInt(s);
  if (ns.isBigDecimalSchema()) return Number(s);
  // A string with a media type travels base64-encoded in a header (Smithy httpHeader trait).
  if (location === "header" && ns.getMergedTraits().mediaType)
    return Buffer.from(s, "base64").toString("utf8");
  return s;
}

function stringOf(ns: NormalizedSchema, value: unknown, location: Location): string {
  if (value instanceof Date) {
    const format = timestampFormat(ns, location);
    return format === 6
      ? value.toUTCString()
      : format === 7
        ? String(value.getTime() / 1000)
        : value.toISOString();
  }
  if (ns.isBlobSchema()) return Buffer.from(value as Uint8Array | string).toString("base64");
  if (location === "header" && ns.isListSchema() && Array.isArray(value)) {
    const item = ns.getValueSchema();
    return value
      .map((v) => stringOf(item, v, location))
      .map((s) => (item.isTimestampSchema() || !/[",]/.test(s) ? s : `"${s.replace(/["\\]/g, "\\$&")}"`))
      .join(", ");
  }
  if (location === "header" && ns.isStringSchema() && ns.getMergedTraits().mediaType) {
    return Buffer.from(String(value)).toString("base64");
  }
  if (typeof value === "object" && value !== null && "string" in value) return String(value.string);
  return String(value);
}

// ---------------------------------------------------------------------------------------------------------------
// Responses

/** The response AWS sends for a successful call whose output is `output`. */
export function encodeResult(
  service: string,
  operation: string,
  output: unknown,
  requestId: string,
): RawResponse {
  const spec = SERVICES[service];
  const op = operationOf(service, operation);
  if (!spec || !op) throw new Error(`protocol: no operation ${service}:${operation}`);
  const value = (output ?? {}) as Record<string, unknown>;
  switch (spec.protocol) {
    case "ec2Query":
      return {
        status: 200,
        headers: { "content-type": "text/xml;charset=UTF-8", "x-amzn-requestid": requestId },
        body:
          `<?xml version="1.0" encoding="UTF-8"?>\n<${op.name}Response xmlns="${EC2_XMLNS}">` +
          `<requestId>${escapeXml(requestId)}</requestId>${xmlMembers(op.output, value)}</${op.name}Response>`,
      };
    case "awsJson1_0":
    case "awsJson1_1":
      return {
        status: 200,
        headers: { "content-type": jsonContentType(spec.protocol), "x-amzn-requestid": requestId },
        body: op.output.isUnitSchema() ? "{}" : writeJson(op.outputRef, value, false),
      };
    case "restJson1":
      return writeRest(op, value, requestId);
  }
}

/**
 * The response AWS sends for an error: `code` becomes the SDK error's `name`, `message` its `message`, `status`
 * its `$metadata.httpStatusCode`. `fields` are further members of the error shape (Lambda's `Type`/`Reason`,
 * EC2 extra elements); members the error shape binds to headers (Lambda's `Retry-After`) go there.
 */
export function encodeError(
  service: string,
  _operation: string | undefined,
  code: string,
  message: string,
  status: number,
  requestId: string,
  fields: Record<string, unknown> = {},
): RawResponse {
  const spec = SERVICES[service];
  if (spec?.protocol === "ec2Query") {
    // EC2: <Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>.
    let extra = "";
    for (const [k, v] of Object.entries(fields))
      if (v != null) extra += `<${k}>${escapeXml(String(v))}</${k}>`;
    return {
      status,
      headers: { "content-type": "text/xml;charset=UTF-8", "x-amzn-requestid": requestId },
      body:
        `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${escapeXml(code)}</Code>` +
        `<Message>${escapeXml(message)}</Message>${extra}</Error></Errors>` +
        `<RequestID>${escapeXml(requestId)}</RequestID></Response>`,
    };
  }
  // JSON protocols: the error's shape name in `__type` (awsJson1_0 sends the full shape id) and in the
  // X-Amzn-Errortype header, its members in the body; the message member is named as the error shape names it.
  const protocol = spec?.protocol ?? "awsJson1_1";
  const namespace = spec?.namespace ?? "";
  const shape = errorShape(namespace, code);
  const headers: Record<string, string> = {
    "content-type": protocol === "restJson1" ? "application/json" : jsonContentType(protocol),
    "x-amzn-requestid": requestId,
    "x-amzn-errortype": code,
  };
  const members: Record<string, unknown> = { ...fields };
  const messageKey = shape && memberNames(shape).includes("Message") ? "Message" : "message";
  members[messageKey] = message;
  let body: Record<string, unknown> = members;
  if (shape) {
    const bodyNames: string[] = [];
    for (const [name, member] of shape.structIterator()) {
      const header = member.getMergedTraits().httpHeader;
      if (header && protocol === "restJson1") {
        if (members[name] != null) headers[header.toLowerCase()] = stringOf(member, members[name], "header");
      } else bodyNames.push(name);
    }
    const known = new Set(memberNames(shape));
    const modeled = bodyNames.length
      ? (JSON.parse(
          writeJson(bodySchema(shape, bodyNames), members, protocol === "restJson1").toString("utf8"),
        ) as object)
      : {};
    const unmodeled = Object.fromEntries(Object.entries(members).filter(([k]) => !known.has(k)));
    body = { ...unmodeled, ...modeled };
  }
  const type = protocol === "awsJson1_0" ? `${shapeNamespace(shape) ?? namespace}#${code}` : code;
  return {
    status,
    headers,
    body: JSON.stringify(protocol === "restJson1" ? body : { __type: type, ...body }),
  };
}

function jsonContentType(protocol: Protocol): string {
  return protocol === "awsJson1_0" ? "application/x-amz-json-1.0" : "application/x-amz-json-1.1";
}

function errorShape(namespace: string, code: string): NormalizedSchema | undefined {
  if (!namespace) return undefined;
  try {
    return NormalizedSchema.of(TypeRegistry.for(namespace).getSchema(`${namespace}#${code}`));
  } catch {
    return undefined; // not a modeled error of this service (EC2 models none)
  }
}

function shapeNamespace(shape: NormalizedSchema | undefined): string | undefined {
  const name = shape?.getName(true);
  return name?.includes("#") ? name.split("#")[0] : undefined;
}

function memberNames(ns: NormalizedSchema): string[] {
  return [...ns.structIterator()].map(([name]) => name);
}

function writeRest(op: Operation, output: Record<string, unknown>, requestId: string): RawResponse {
  let status = op.http?.code ?? 200;
  const headers: Record<string, string> = { "x-amzn-requestid": requestId };
  const bodyMembers: string[] = [];
  let payload: { member: NormalizedSchema; value: unknown } | undefined;
  for (const [name, member] of op.output.structIterator()) {
    const t = member.getMergedTraits();
    const value = output[name];
    if (t.httpHeader) {
      if (value != null) headers[t.httpHeader.toLowerCase()] = stringOf(member, value, "header");
    } else if (typeof t.httpPrefixHeaders === "string") {
      for (const [k, v] of Object.entries((value ?? {}) as Record<string, unknown>)) {
        if (v != null)
          headers[`${t.httpPrefixHeaders}${k}`.toLowerCase()] = stringOf(
            member.getValueSchema(),
            v,
            "header",
          );
      }
    } else if (t.httpResponseCode) {
      if (typeof value === "number") status = value;
    } else if (t.httpPayload) {
      payload = { member, value };
    } else {
      bodyMembers.push(name);
    }
  }
  if (payload) {
    const { member, value } = payload;
    const mediaType = member.getMergedTraits().mediaType;
    if (member.isBlobSchema() || member.isStringSchema()) {
      headers["content-type"] =
        mediaType ?? (member.isBlobSchema() ? "application/octet-stream" : "text/plain");
      const body = value == null ? Buffer.alloc(0) : Buffer.from(value as Uint8Array | string);
      return { status, headers, body };
    }
    headers["content-type"] = mediaType ?? "application/json";
    return { status, headers, body: value == null ? "" : writeJson(member, value, true) };
  }
  headers["content-type"] = "application/json";
  const body = bodyMembers.length ? writeJson(bodySchema(op.output, bodyMembers), output, true) : "{}";
  return { status, headers, body };
}

// EC2 XML, element for element as the SDK's XmlShapeDeserializer reads it: a member is the element named by its
// xmlName (else its member name); a list is a wrapper whose items are named by the list member's xmlName (EC2:
// `item`), or repeated elements when xmlFlattened; a map holds `entry` elements of key and value.

function xmlMembers(ns: NormalizedSchema, value: Record<string, unknown>): string {
  let out = "";
  for (const [name, member] of ns.structIterator()) {
    const v = value[name];
    if (v != null) out += xmlElement(member.getMemberTraits().xmlName ?? name, member, v);
  }
  return out;
}

function xmlElement(tag: string, ns: NormalizedSchema, value: unknown): string {
  const flat = Boolean(ns.getMergedTraits().xmlFlattened);
  if (flat && ns.isListSchema() && Array.isArray(value)) {
    return value.map((v) => (v == null ? "" : xmlElement(tag, ns.getValueSchema(), v))).join("");
  }
  if (flat && ns.isMapSchema()) return `${xmlEntries(ns, value, tag)}`;
  return `<${tag}>${xmlContent(ns, value)}</${tag}>`;
}

function xmlEntries(ns: NormalizedSchema, value: unknown, tag: string): string {
  const keyTag = ns.getKeySchema().getMergedTraits().xmlName ?? "key";
  const valueNs = ns.getValueSchema();
  const valueTag = valueNs.getMergedTraits().xmlName ?? "value";
  let out = "";
  for (const [k, v] of Object.entries((value ?? {}) as Record<string, unknown>)) {
    if (v != null)
      out += `<${tag}><${keyTag}>${escapeXml(k)}</${keyTag}>${xmlElement(valueTag, valueNs, v)}</${tag}>`;
  }
  return out;
}

function xmlContent(ns: NormalizedSchema, value: unknown): string {
  if (ns.isListSchema() && Array.isArray(value)) {
    const item = ns.getValueSchema();
    const tag = item.getMergedTraits().xmlName ?? "member";
    return value.map((v) => (v == null ? "" : xmlElement(tag, item, v))).join("");
  }
  if (ns.isMapSchema()) return xmlEntries(ns, value, "entry");
  if (ns.isStructSchema()) return xmlMembers(ns, (value ?? {}) as Record<string, unknown>);
  return escapeXml(stringOf(ns, value, "query"));
}

function escapeXml(s: string): string {
  return s.replace(/[&<>"'\r]/g, (c) => `&#${c.charCodeAt(0)};`);
}
