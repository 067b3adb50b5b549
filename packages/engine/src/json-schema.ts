/**
 * The JSON Schema subset JSON mode can enforce while generating, compiled to the grammar's nodes
 * (json-grammar.ts). Anything outside it is refused naming the keywords, never ignored.
 *
 * Supported: `type` one of object, array, string, number, integer, boolean, null; `properties`
 * with `required` (members are generated in the order listed; a property not in `required` may
 * be left out; no other keys are generated, so `additionalProperties` may only be false or
 * absent); `items` (absent: any values); `enum` and `const` (any JSON values, matched as their
 * JSON.stringify text); annotations (title, description, $schema, $id, $comment, default,
 * examples) are accepted and have no effect. The top level must be an object. An object schema
 * without `properties` takes any keys and values.
 */
import { UsageError } from "./errors.js";
import type { ObjectProp, SchemaNode } from "./json-grammar.js";

/** A schema JSON mode cannot enforce; `path` names the place (e.g. `schema.properties.age`). */
export class SchemaError extends UsageError {
  constructor(readonly path: string, message: string) {
    super(`${path}: ${message}`);
  }
}

const TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"];
const ANNOTATIONS = new Set(["title", "description", "$schema", "$id", "$comment", "default", "examples"]);
const KEYWORDS: Record<string, Set<string>> = {
  object: new Set(["type", "properties", "required", "additionalProperties"]),
  array: new Set(["type", "items"]),
};
const enc = new TextEncoder();

/** Compiles a schema; the top level must be an object. */
export function compileSchema(schema: unknown, path = "schema"): SchemaNode {
  const node = compile(schema, path);
  if (node.kind !== "object") throw new SchemaError(path, `the top level must be {"type": "object", ...} (JSON mode generates an object)`);
  return node;
}

function compile(schema: unknown, path: string): SchemaNode {
  if (schema === true || (schema && typeof schema === "object" && !Array.isArray(schema) && Object.keys(schema).every((k) => ANNOTATIONS.has(k)))) return { kind: "any" };
  if (!schema || typeof schema !== "object" || Array.isArray(schema)) throw new SchemaError(path, `expected a schema object, got ${JSON.stringify(schema)}`);
  const s = schema as Record<string, unknown>;
  if (s.enum !== undefined || s.const !== undefined) {
    checkKeywords(s, path, new Set(["enum", "const", "type"]));
    const values = s.const !== undefined ? [s.const] : s.enum;
    if (!Array.isArray(values) || values.length === 0) throw new SchemaError(`${path}.enum`, "expected a non-empty list");
    const texts = values.map((v) => JSON.stringify(v));
    if (s.type !== undefined) {
      const t = s.type;
      const ok = values.every((v) => typeof t === "string" && jsonType(v, t));
      if (!ok) throw new SchemaError(`${path}.type`, `${JSON.stringify(t)} does not hold every enum value`);
    }
    return { kind: "literals", values: [...new Set(texts)].map((t) => enc.encode(t)) };
  }
  const type = s.type;
  if (typeof type !== "string" || !TYPES.includes(type)) {
    if (type === undefined) throw new SchemaError(path, `needs "type" (or "enum"/"const"); unsupported: ${Object.keys(s).filter((k) => !ANNOTATIONS.has(k)).join(", ") || "an empty schema"}`);
    throw new SchemaError(`${path}.type`, `${JSON.stringify(type)}: expected one of ${TYPES.join(", ")} (a list of types is not supported)`);
  }
  checkKeywords(s, path, KEYWORDS[type] ?? new Set(["type"]));
  switch (type) {
    case "string":
    case "number":
    case "integer":
      return { kind: type };
    case "boolean":
      return { kind: "literals", values: [enc.encode("true"), enc.encode("false")] };
    case "null":
      return { kind: "literals", values: [enc.encode("null")] };
    case "array":
      return { kind: "array", items: s.items === undefined ? { kind: "any" } : compile(s.items, `${path}.items`) };
    default:
      return compileObject(s, path);
  }
}

function compileObject(s: Record<string, unknown>, path: string): SchemaNode {
  if (s.additionalProperties !== undefined && s.additionalProperties !== false) {
    throw new SchemaError(`${path}.additionalProperties`, "only false is supported (the listed properties are the only keys generated)");
  }
  if (s.properties === undefined) {
    if (s.required !== undefined) throw new SchemaError(`${path}.required`, "needs properties");
    return { kind: "object", props: null };
  }
  if (!s.properties || typeof s.properties !== "object" || Array.isArray(s.properties)) throw new SchemaError(`${path}.properties`, "expected an object");
  const required = s.required ?? [];
  if (!Array.isArray(required) || !required.every((r) => typeof r === "string")) throw new SchemaError(`${path}.required`, "expected a list of property names");
  const names = Object.keys(s.properties);
  for (const r of required) if (!names.includes(r)) throw new SchemaError(`${path}.required`, `${JSON.stringify(r)} is not in properties`);
  const props: ObjectProp[] = names.map((name) => ({
    name,
    key: enc.encode(JSON.stringify(name)),
    value: compile((s.properties as Record<string, unknown>)[name], `${path}.properties.${name}`),
    required: required.includes(name),
  }));
  return { kind: "object", props };
}

function checkKeywords(s: Record<string, unknown>, path: string, allowed: Set<string>): void {
  const bad = Object.keys(s).filter((k) => !allowed.has(k) && !ANNOTATIONS.has(k));
  if (bad.length > 0) throw new SchemaError(path, `unsupported keyword${bad.length > 1 ? "s" : ""} ${bad.join(", ")} (supported: type, properties, required, additionalProperties: false, items, enum, const)`);
}

function jsonType(v: unknown, t: string): boolean {
  if (t === "null") return v === null;
  if (t === "integer") return Number.isInteger(v);
  if (t === "array") return Array.isArray(v);
  if (t === "object") return v !== null && typeof v === "object" && !Array.isArray(v);
  return typeof v === t;
}
