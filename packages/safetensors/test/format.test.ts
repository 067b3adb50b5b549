import { describe, expect, it } from "vitest";
import { DTYPES, DTYPE_BITS, SafetensorsError, parseSafetensors, typedView } from "../src/index.js";
import { BACKENDS, fileOf, independentCheck } from "./helpers.js";

const t = (name: string, dtype: string, shape: number[], begin: number, end: number) =>
  `${JSON.stringify(name)}:{"dtype":"${dtype}","shape":[${shape.join(",")}],"data_offsets":[${begin},${end}]}`;

/** [case, bytes, expected code, expected tensor (optional)] from docs/formats.md §1.3. */
const BAD: [string, Uint8Array, string, string?][] = [
  ["empty file", new Uint8Array(0), "HeaderTooSmall"],
  ["7 bytes", new Uint8Array(7), "HeaderTooSmall"],
  ["N = 0", fileOf(""), "InvalidJson"],
  ["N past EOF", fileOf("", 0, 60n), "InvalidHeaderLength"],
  ["huge N", fileOf("{}", 0, 0xffffff000000003cn), "HeaderTooLarge"],
  ["N = 2^64-1", fileOf("{}", 0, 0xffffffffffffffffn), "HeaderTooLarge"],
  ["N = 100,000,001", fileOf("{}", 0, 100_000_001n), "HeaderTooLarge"],
  ["non-UTF-8", fileOf('{"a\xff":1}'.replace("\xff", ""), 0), "InvalidHeader"],
  ["not JSON", fileOf("{"), "InvalidJson"],
  ["top-level array", fileOf("[]"), "InvalidHeader"],
  ["trailing garbage", fileOf("{} x"), "InvalidJson"],
  ["NUL padding", fileOf("{}\0\0"), "InvalidJson"],
  ["BOM", fileOf("\ufeff{}"), "InvalidJson"],
  ["U+00A0 padding", fileOf("{}\u00a0"), "InvalidJson"],
  ["polyglot suffix", fileOf(`{${t("a", "U8", [2], 0, 2)}}`, 4), "MetadataIncompleteBuffer"],
  ["truncated data", fileOf(`{${t("a", "U8", [4], 0, 4)}}`, 2), "MetadataIncompleteBuffer"],
  ["shape x dtype mismatch", fileOf(`{${t("a", "I32", [2, 2], 0, 4)}}`, 4), "TensorInvalidInfo", "a"],
  ["overflow 2^64", fileOf(`{${t("a", "U8", [2], 0, 2).replace("[2]", "[2,18446744073709551614]")}}`, 2), "ValidationOverflow", "a"],
  ["overflow product", fileOf(`{${t("a", "U8", [4294967296, 4294967296], 0, 0)}}`), "ValidationOverflow", "a"],
  ["aliased ranges", fileOf(`{${t("a", "U8", [16], 0, 16)},${t("b", "U8", [16], 0, 16)}}`, 16), "InvalidOffset"],
  ["gap", fileOf(`{${t("a", "U8", [2], 0, 2)},${t("b", "U8", [2], 3, 5)}}`, 5), "InvalidOffset", "b"],
  ["end < begin", fileOf(`{${t("a", "U8", [0], 2, 0)}}`, 2), "InvalidOffset", "a"],
  ["first not at 0", fileOf(`{${t("a", "U8", [2], 1, 3)}}`, 3), "InvalidOffset", "a"],
  ["negative offset", fileOf(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[-1,1]}}`, 2), "InvalidTensorEntry", "a"],
  ["float offset", fileOf(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2.0]}}`, 2), "InvalidTensorEntry", "a"],
  ["exponent shape", fileOf(`{"a":{"dtype":"U8","shape":[2e0],"data_offsets":[0,2]}}`, 2), "InvalidTensorEntry", "a"],
  ["offset > 2^53", fileOf(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[9007199254740993,9007199254740993]}}`), "ValidationOverflow", "a"],
  ["1 offset", fileOf(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0]}}`), "InvalidTensorEntry", "a"],
  ["3 offsets", fileOf(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0,0]}}`), "InvalidTensorEntry", "a"],
  ["F4 odd", fileOf(`{${t("a", "F4", [3], 0, 2)}}`, 2), "MisalignedSlice", "a"],
  ["F6 count % 4", fileOf(`{${t("a", "F6_E2M3", [2], 0, 2)}}`, 2), "MisalignedSlice", "a"],
  ["dtype F8", fileOf(`{${t("a", "F8", [2], 0, 2)}}`, 2), "UnknownDtype", "a"],
  ["dtype f32", fileOf(`{${t("a", "f32", [1], 0, 4)}}`, 4), "UnknownDtype", "a"],
  ["dtype C128", fileOf(`{${t("a", "C128", [1], 0, 16)}}`, 16), "UnknownDtype", "a"],
  ["duplicate name", fileOf(`{${t("a", "U8", [2], 0, 2)},${t("a", "U8", [2], 2, 4)}}`, 4), "DuplicateKey", "a"],
  ["exact duplicate", fileOf(`{${t("a", "U8", [2], 0, 2)},${t("a", "U8", [2], 0, 2)}}`, 2), "DuplicateKey", "a"],
  ["duplicate __metadata__", fileOf(`{"__metadata__":{},"__metadata__":{}}`), "DuplicateKey", "__metadata__"],
  ["duplicate field", fileOf(`{"a":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}}`), "DuplicateKey", "a"],
  ["metadata number", fileOf(`{"__metadata__":{"k":1}}`), "InvalidMetadata"],
  ["metadata object", fileOf(`{"__metadata__":{"k":{}}}`), "InvalidMetadata"],
  ["metadata null value", fileOf(`{"__metadata__":{"k":null}}`), "InvalidMetadata"],
  ["metadata array", fileOf(`{"__metadata__":[]}`), "InvalidMetadata"],
  ["deep nesting", fileOf(`{"__metadata__":{"k":${"[".repeat(100000)}}}`), "InvalidMetadata"],
  ["lone surrogate name", fileOf(`{"\\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`), "InvalidJson"],
  ["lone low surrogate", fileOf(`{"\\udc00x":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`), "InvalidJson"],
  ["bad escape", fileOf(`{"\\x":{}}`), "InvalidJson"],
  ["raw control char", fileOf(`{"a\u0001":{}}`), "InvalidJson"],
  ["missing dtype", fileOf(`{"a":{"shape":[0],"data_offsets":[0,0]}}`), "InvalidTensorEntry", "a"],
  ["missing shape", fileOf(`{"a":{"dtype":"U8","data_offsets":[0,0]}}`), "InvalidTensorEntry", "a"],
  ["unknown field", fileOf(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1}}`), "InvalidTensorEntry", "a"],
  ["entry not object", fileOf(`{"a":[]}`), "InvalidTensorEntry", "a"],
  ["dtype not string", fileOf(`{"a":{"dtype":8,"shape":[0],"data_offsets":[0,0]}}`), "InvalidTensorEntry", "a"],
  ["leading zero", fileOf(`{"a":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}}`, 1), "InvalidJson"],
];
// The non-UTF-8 case needs a raw 0xff byte.
BAD[7] = ["non-UTF-8", fileOf(Uint8Array.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d])), "InvalidUtf8"];
BAD.push(["overlong UTF-8", fileOf(Uint8Array.from([0x7b, 0x22, 0xc0, 0xaf, 0x22, 0x3a, 0x31, 0x7d])), "InvalidUtf8"]);
BAD.push(["CESU-8 surrogate", fileOf(Uint8Array.from([0x7b, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x3a, 0x31, 0x7d])), "InvalidUtf8"]);

const GOOD: [string, Uint8Array][] = [
  ["empty object", fileOf("{}")],
  ["metadata only", fileOf(`{"__metadata__":{"format":"pt"}}`)],
  ["metadata null", fileOf(`{"__metadata__":null}`)],
  ["whitespace padded", fileOf(`  \n{}\t\r\n   `)],
  ["scalar", fileOf(`{${t("s", "F32", [], 0, 4)}}`, 4)],
  ["zero-size", fileOf(`{${t("z", "F32", [2, 0], 0, 0)},${t("a", "U8", [1], 0, 1)}}`, 1)],
  ["__proto__ name", fileOf(`{${t("__proto__", "U8", [1], 0, 1)},${t("constructor", "U8", [1], 1, 2)}}`, 2)],
  ["escaped name", fileOf(`{"a\\u002eb\\n\\ud83d\\ude00":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1)],
  ["empty name", fileOf(`{${t("", "U8", [1], 0, 1)}}`, 1)],
  ["unsorted entries", fileOf(`{${t("b", "U8", [2], 2, 4)},${t("a", "U8", [2], 0, 2)}}`, 4)],
  ["F4 even", fileOf(`{${t("f", "F4", [4], 0, 2)}}`, 2)],
  ["F6 x4", fileOf(`{${t("f", "F6_E3M2", [8], 0, 6)}}`, 6)],
];

describe.each(BACKENDS)("header validation (%s)", (backend) => {
  it.each(BAD)("rejects %s", (_label, bytes, code, tensor) => {
    let err: unknown;
    try {
      parseSafetensors(bytes, { backend, name: "bad.safetensors" });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SafetensorsError);
    const e = err as SafetensorsError;
    expect(e.code).toBe(code);
    expect(e.file).toBe("bad.safetensors");
    expect(e.message).toContain("bad.safetensors");
    if (tensor !== undefined) expect(e.tensor).toBe(tensor);
    expect(independentCheck(bytes)).not.toBeNull();
  });

  it.each(GOOD)("accepts %s", (_label, bytes) => {
    expect(independentCheck(bytes)).toBeNull();
    const ck = parseSafetensors(bytes, { backend });
    for (const info of ck.tensors) expect(ck.view(info.name).byteLength).toBe(info.byteLength);
  });

  it("keeps names, shapes, offsets and metadata", () => {
    const bytes = fileOf(`{"__metadata__":{"format":"pt","__proto__":"x"},${t("b", "BF16", [2, 3], 4, 16)},${t("a", "F32", [1], 0, 4)}}`, 16);
    const ck = parseSafetensors(bytes, { backend });
    expect(ck.size).toBe(2);
    const hdr = bytes.length - 16;
    expect(ck.get("b")).toEqual({ name: "b", dtype: "BF16", shape: [2, 3], file: "<memory>", offset: hdr + 4, byteLength: 12, dataOffsets: [4, 16] });
    expect(ck.metadata!["format"]).toBe("pt");
    expect(Object.getOwnPropertyDescriptor(ck.metadata, "__proto__")?.value).toBe("x");
    expect(Object.getPrototypeOf(ck.metadata)).toBeNull();
    expect([...ck.names()]).toEqual(["b", "a"]);
    expect(ck.has("__proto__")).toBe(false);
    expect(() => ck.get("zz")).toThrow(/TensorNotFound.*zz/);
  });

  it("knows every dtype of safetensors 0.8 with its bit size", () => {
    const parts: string[] = [];
    let at = 0;
    DTYPES.forEach((d, i) => {
      const bytes = (8 * DTYPE_BITS[i]) / 8;
      parts.push(t(`t_${d}`, d, [8], at, at + bytes));
      at += bytes;
    });
    const ck = parseSafetensors(fileOf(`{${parts.join(",")}}`, at), { backend });
    expect(ck.size).toBe(22);
    expect(ck.get("t_F4").byteLength).toBe(4);
    expect(ck.get("t_F6_E2M3").byteLength).toBe(6);
    expect(ck.get("t_C64").byteLength).toBe(64);
    expect(ck.get("t_F8_E8M0").byteLength).toBe(8);
  });
});

describe("typed views", () => {
  it("is zero-copy when aligned and refuses or copies when not", () => {
    // header padded so that data starts 8-aligned; "a" U8[1] then "f" F32[2] at data offset 1 (misaligned)
    const h = `{${t("a", "U8", [1], 0, 1)},${t("f", "F32", [2], 1, 9)},${t("g", "F32", [1], 9, 13)}}`;
    const padded = h + " ".repeat((8 - (h.length % 8)) % 8);
    const bytes = fileOf(padded, 13);
    const ck = parseSafetensors(bytes);
    const f = ck.view("f");
    expect(f.buffer).toBe(bytes.buffer);
    expect(() => typedView(f, "F32", { tensor: "f" })).toThrow(/MisalignedView.*"f"/);
    const copy = typedView(f, "F32", { copy: true });
    expect(copy.length).toBe(2);
    expect(new Uint8Array(copy.buffer)).toEqual(f);
    const a = typedView(ck.view("a"), "U8");
    expect(a.buffer).toBe(bytes.buffer);
  });
});
