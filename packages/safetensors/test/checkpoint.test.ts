import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { SafetensorsError, SafetensorsWriter, ShardedCheckpointWriter, openCheckpoint, openCheckpointSync, openSafetensorsSync } from "../src/index.js";
import { BACKENDS, removedAfterFile, tempDir } from "./helpers.js";

/** A tiny K3-like checkpoint: 2 layers x 3 experts (ids written in lexicographic order) + trunk. */
function writeTinyK3(dir: string, experts = 12): { names: string[] } {
  const w = new ShardedCheckpointWriter(dir, { shardMetadata: { format: "pt" } });
  const names: string[] = [];
  const add = (name: string, dtype: "BF16" | "U8" | "F32", shape: number[]) => {
    const n = shape.reduce((a, b) => a * b, 1) * (dtype === "BF16" ? 2 : dtype === "F32" ? 4 : 1);
    const data = Uint8Array.from({ length: n }, (_, i) => (i + names.length * 13) & 255);
    w.add(name, dtype, shape, data);
    names.push(name);
  };
  add("language_model.model.embed_tokens.weight", "BF16", [16, 8]);
  for (let l = 0; l < 2; l++) {
    const p = `language_model.model.layers.${l}.`;
    add(`${p}input_layernorm.weight`, "BF16", [8]);
    add(`${p}self_attn.q_proj.weight`, "BF16", [8, 8]);
    add(`${p}block_sparse_moe.gate.weight`, "BF16", [experts, 8]);
    add(`${p}block_sparse_moe.shared_experts.gate_proj.weight`, "BF16", [4, 8]);
    const ids = Array.from({ length: experts }, (_, i) => String(i)).sort();
    for (const e of ids) {
      for (const m of ["w1", "w2", "w3"]) {
        add(`${p}block_sparse_moe.experts.${e}.${m}.weight_packed`, "U8", [4, 2]);
        add(`${p}block_sparse_moe.experts.${e}.${m}.weight_scale`, "U8", [4, 1]);
      }
    }
    w.nextShard();
  }
  add("language_model.lm_head.weight", "BF16", [16, 8]);
  w.finish();
  return { names };
}

describe.each(BACKENDS)("checkpoints (%s)", (backend) => {
  it("indexes a sharded checkpoint through index.json, groups layers and experts, reads runs", async () => {
    const dir = tempDir("ck");
    const { names } = writeTinyK3(dir);
    expect(readdirSync(dir).sort()).toEqual([
      "model-00001-of-00003.safetensors",
      "model-00002-of-00003.safetensors",
      "model-00003-of-00003.safetensors",
      "model.safetensors.index.json",
    ]);
    const ck = await openCheckpoint(dir, { backend });
    expect(ck.backend).toBe(backend);
    expect(ck.size).toBe(names.length);
    expect([...ck.names()].sort()).toEqual([...names].sort());
    expect(ck.warnings).toEqual([]);
    expect(ck.metadata).toEqual({ total_size: ck.dataBytes });
    expect(ck.shardMetadata(0)).toEqual(Object.assign(Object.create(null), { format: "pt" }));
    expect(ck.layerNumbers()).toEqual([0, 1]);
    const layer = ck.layer(1);
    expect(layer.expertIds).toEqual(Array.from({ length: 12 }, (_, i) => i));
    expect(layer.trunk.map((t) => t.name.split(".").slice(4).join("."))).toEqual([
      "input_layernorm.weight",
      "self_attn.q_proj.weight",
      "block_sparse_moe.gate.weight",
      "block_sparse_moe.shared_experts.gate_proj.weight",
    ]);
    expect(layer.trunkRuns.length).toBe(1);
    const experts = ck.experts(1);
    expect(experts.map((e) => e.id)).toEqual(Array.from({ length: 12 }, (_, i) => i));
    // lexicographic storage: expert 2 comes after 10 and 11
    expect(experts[2].offset).toBeGreaterThan(experts[11].offset);
    for (const e of experts) {
      expect(e.contiguous).toBe(true);
      expect(e.tensors.length).toBe(6);
      expect(e.byteLength).toBe(3 * (8 + 4));
      const run = await ck.readRun(e.tensors.map((t) => t.name));
      const joined = new Uint8Array(e.byteLength);
      let at = 0;
      for (const t of e.tensors) {
        joined.set(ck.readSync(t.name), at);
        at += t.byteLength;
      }
      expect(run).toEqual(joined);
      expect(ck.readRunSync({ file: e.file, offset: e.offset, byteLength: e.byteLength })).toEqual(joined);
    }
    // readInto at an offset, sync and async
    const name = "language_model.model.layers.0.self_attn.q_proj.weight";
    const buf = new Uint8Array(200);
    const a = await ck.readInto(name, buf, 7);
    expect(a.byteOffset).toBe(7);
    expect(ck.readIntoSync(name, new Uint8Array(128), 0)).toEqual(a);
    expect(() => ck.readIntoSync(name, new Uint8Array(10), 0)).toThrow(/BufferTooSmall/);
    expect(() => ck.readRunSync([name, "language_model.lm_head.weight"])).toThrow(/separate byte ranges/);
    expect(ck.globals().map((t) => t.name)).toEqual(["language_model.model.embed_tokens.weight", "language_model.lm_head.weight"]);
    await ck.close();
    await expect(ck.read(name)).rejects.toThrow(/Closed/);
  });

  it("indexes every *.safetensors file when there is no index, and refuses a tensor in two files", () => {
    const dir = tempDir("noidx");
    const w1 = new SafetensorsWriter(join(dir, "a.safetensors"));
    w1.add("x", "F32", [2], new Float32Array([1, 2]));
    w1.finish();
    const w2 = new SafetensorsWriter(join(dir, "b.safetensors"));
    w2.add("y", "F32", [1], new Float32Array([3]));
    w2.finish();
    const ck = openCheckpointSync(dir, { backend });
    expect(ck.size).toBe(2);
    expect(new Float32Array(ck.readSync("x").buffer)).toEqual(new Float32Array([1, 2]));
    const w3 = new SafetensorsWriter(join(dir, "c.safetensors"));
    w3.add("x", "F32", [1], new Float32Array([3]));
    w3.finish();
    expect(() => openCheckpointSync(dir, { backend })).toThrow(expect.objectContaining({ code: "DuplicateTensor", tensor: "x" }));
  });

  it("checks index.json: unsafe paths, missing shards, tensors not in shard / not in index, total_size", () => {
    const dir = tempDir("idx");
    writeTinyK3(dir, 2);
    const indexPath = join(dir, "model.safetensors.index.json");
    const original = JSON.parse(readFileSync(indexPath, "utf8"));
    const tryWith = (mutate: (ix: { metadata: Record<string, unknown>; weight_map: Record<string, string> }) => void, text?: string) => {
      const ix = structuredClone(original);
      mutate(ix);
      writeFileSync(indexPath, text ?? JSON.stringify(ix));
      try {
        return openCheckpointSync(dir, { backend });
      } catch (e) {
        return e as SafetensorsError;
      }
    };
    const first = Object.keys(original.weight_map)[0];
    for (const bad of ["../x.safetensors", "/etc/passwd", "https://evil/x", "a\\b", "sub/./x", "%2e%2e/x", "a\u0001", "", "C:x"]) {
      const r = tryWith((ix) => (ix.weight_map[first] = bad));
      expect(r, bad).toBeInstanceOf(SafetensorsError);
      expect((r as SafetensorsError).code, bad).toBe("UnsafeShardPath");
    }
    mkdirSync(removedAfterFile(join(dir, "..", "outside-shard")), { recursive: true });
    symlinkSync("/etc/hostname", join(dir, "link.safetensors"));
    expect((tryWith((ix) => (ix.weight_map[first] = "link.safetensors")) as SafetensorsError).code).toBe("UnsafeShardPath");
    expect((tryWith((ix) => (ix.weight_map[first] = "nope.safetensors")) as SafetensorsError).code).toBe("MissingShard");
    const wrongShard = tryWith((ix) => (ix.weight_map[first] = "model-00002-of-00003.safetensors")) as SafetensorsError;
    expect(wrongShard.code).toBe("TensorNotInShard");
    expect(wrongShard.tensor).toBe(first);
    const missing = tryWith((ix) => delete ix.weight_map[first]) as SafetensorsError;
    expect(missing.code).toBe("TensorNotInIndex");
    expect(missing.tensor).toBe(first);
    const extra = tryWith((ix) => (ix.weight_map["ghost"] = "model-00001-of-00003.safetensors")) as SafetensorsError;
    expect(extra.code).toBe("TensorNotInShard");
    const dup = tryWith(() => undefined, `{"weight_map":{"${first}":"model-00001-of-00003.safetensors","${first}":"model-00001-of-00003.safetensors"}}`) as SafetensorsError;
    expect(dup.code).toBe("DuplicateKey");
    // The sorted-order fast paths (no hash for duplicates, sequential cross-check) must fall back
    // exactly: a repeat after other names, and a reversed (unsorted, unique) weight_map.
    const names = Object.keys(original.weight_map);
    const entry = (n: string) => `${JSON.stringify(n)}:${JSON.stringify(original.weight_map[n])}`;
    const later = tryWith(() => undefined, `{"weight_map":{${[...names, names[1]].map(entry).join(",")}}}`) as SafetensorsError;
    expect(later.code).toBe("DuplicateKey");
    expect(later.tensor).toBe(names[1]);
    const reversed = tryWith(() => undefined, `{"weight_map":{${[...names].reverse().map(entry).join(",")}}}`);
    expect(reversed).not.toBeInstanceOf(SafetensorsError);
    const reversedMissing = tryWith(() => undefined, `{"weight_map":{${names.slice(1).reverse().map(entry).join(",")}}}`) as SafetensorsError;
    expect(reversedMissing.code).toBe("TensorNotInIndex");
    expect(reversedMissing.tensor).toBe(names[0]);
    expect((tryWith(() => undefined, `{"weight_map":[]}`) as SafetensorsError).code).toBe("InvalidIndex");
    expect((tryWith(() => undefined, `{"metadata":{}}`) as SafetensorsError).code).toBe("InvalidIndex");
    expect((tryWith(() => undefined, `{"metadata":${"[".repeat(200)}${"]".repeat(200)},"weight_map":{}}`) as SafetensorsError).code).toBe("InvalidIndex");
    const warned = tryWith((ix) => (ix.metadata.total_size = 1));
    expect(warned).not.toBeInstanceOf(SafetensorsError);
    const ck = warned as Exclude<typeof warned, SafetensorsError>;
    expect(ck.warnings.length).toBe(1);
    expect(ck.warnings[0]).toMatch(/total_size is 1/);
  });

  it("checks index.json's kind and size before reading it: a FIFO, /dev/zero and a 1.2 GB sparse file", async () => {
    const dir = tempDir("idx-kind");
    writeTinyK3(dir, 2);
    const indexPath = join(dir, "model.safetensors.index.json");
    const refusal = (sync: boolean) => {
      try {
        const r = sync ? openCheckpointSync(dir, { backend }) : null;
        return r;
      } catch (e) {
        return e as SafetensorsError;
      }
    };
    rmSync(indexPath);
    execFileSync("mkfifo", [indexPath]);
    // A writer that closes the FIFO after 1 s without writing: a reader that blocks (the old
    // code) then ends with an empty index instead of hanging the test run.
    const writer = spawn("sh", ["-c", 'exec 3>"$1"; sleep 1', "sh", indexPath], { stdio: "ignore" });
    try {
      const r = refusal(true) as SafetensorsError;
      expect(r).toBeInstanceOf(SafetensorsError);
      expect(r.code).toBe("InvalidIndex");
      expect(r.message).toMatch(/the index is a FIFO, not a regular file/);
      await expect(openCheckpoint(dir, { backend })).rejects.toThrow(/the index is a FIFO, not a regular file/);
    } finally {
      writer.kill();
    }
    rmSync(indexPath);
    symlinkSync("/dev/zero", indexPath);
    expect((refusal(true) as SafetensorsError).message).toMatch(/the index is a character device, not a regular file/);
    rmSync(indexPath);
    // Sparse: 1.2 GB of holes. Refused on its size, before a byte is read (the peak RSS of this
    // process does not move by the file's size).
    writeFileSync(indexPath, "");
    truncateSync(indexPath, 1_200_000_000);
    const before = process.resourceUsage().maxRSS;
    const big = refusal(true) as SafetensorsError;
    expect(big.code).toBe("InvalidIndex");
    expect(big.message).toMatch(/the index is larger than 1000000000 bytes/);
    expect((process.resourceUsage().maxRSS - before) * 1024).toBeLessThan(200e6);
    rmSync(dir, { recursive: true, force: true });
  });

  it("opens the reference tiny-k3 fixture when present", async (ctx) => {
    const dir = join(import.meta.dirname, "..", "..", "..", "fixtures", "models", "tiny-k3");
    if (!existsSync(join(dir, "model.safetensors.index.json"))) {
      console.warn("[safetensors tests] fixtures/models/tiny-k3 absent: skipped");
      ctx.skip();
    }
    const ck = await openCheckpoint(dir, { backend });
    expect(ck.size).toBeGreaterThan(100);
    const layers = ck.layerNumbers();
    expect(layers[0]).toBe(0);
    const moe = layers.find((l) => ck.layer(l).expertIds.length > 0)!;
    for (const e of ck.experts(moe)) expect(e.contiguous).toBe(true);
    for (const l of layers) expect(ck.layer(l).trunkRuns.length).toBe(1);
    ck.closeSync();
  });
});

describe("single files", () => {
  it("round-trips through the writer with metadata, a plan and a header reserve", () => {
    const dir = tempDir("w");
    for (const mode of ["plain", "plan", "reserve"] as const) {
      const path = join(dir, `${mode}.safetensors`);
      const tensors = [
        { name: "a", dtype: "F32" as const, shape: [3], data: new Float32Array([1, 2, 3]) },
        { name: "b", dtype: "F4" as const, shape: [2, 2], data: new Uint8Array([0x21, 0x43]) },
        { name: "c", dtype: "BF16" as const, shape: [], data: new Uint16Array([0x3f80]) },
      ];
      const w = new SafetensorsWriter(path, {
        metadata: { format: "pt" },
        plan: mode === "plan" ? tensors : undefined,
        headerReserve: mode === "reserve" ? 4096 : 0,
      });
      for (const t of tensors) w.add(t.name, t.dtype, t.shape, t.data);
      expect(() => w.add("a", "F32", [1], new Float32Array(1))).toThrow(/InvalidArgument/);
      w.finish();
      const bytes = readFileSync(path);
      const n = Number(bytes.readBigUInt64LE(0));
      expect(n % 8).toBe(0);
      if (mode === "reserve") expect(n).toBe(4096);
      for (const backend of BACKENDS) {
        const ck = openSafetensorsSync(path, { backend });
        expect(ck.metadata).toEqual(Object.assign(Object.create(null), { format: "pt" }));
        expect([...ck.names()]).toEqual(["a", "b", "c"]);
        expect(new Float32Array(ck.readSync("a").buffer)).toEqual(new Float32Array([1, 2, 3]));
        expect(ck.readSync("b")).toEqual(new Uint8Array([0x21, 0x43]));
        ck.closeSync();
      }
      expect(readdirSync(dir).filter((f) => f.endsWith(".tmp"))).toEqual([]);
    }
  });

  it("refuses bad tensors in the writer and leaves no temp file on abort", () => {
    const dir = tempDir("wbad");
    const w = new SafetensorsWriter(join(dir, "x.safetensors"));
    expect(() => w.add("a", "F32", [2], new Float32Array(3))).toThrow(/needs 8 bytes/);
    expect(() => w.add("a", "F4" as never, [3], new Uint8Array(2))).toThrow(/whole number of bytes/);
    expect(() => w.add("a", "Q4" as never, [3], new Uint8Array(2))).toThrow(/unknown dtype/);
    expect(() => w.add("__metadata__", "U8", [1], new Uint8Array(1))).toThrow(/reserved/);
    w.abort();
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe.each(BACKENDS)("partly downloaded checkpoints (allowMissingShards, %s)", (backend) => {
  it("indexes the shards on disk, warns about the absent ones, and names the shard a missing tensor needs", async () => {
    const dir = tempDir("partial");
    const { names } = writeTinyK3(dir);
    const gone = "model-00002-of-00003.safetensors"; // layer 1
    const { rmSync } = await import("node:fs");
    rmSync(join(dir, gone));
    // Without the option a missing shard is refused, as before.
    expect(() => openCheckpointSync(dir, { backend })).toThrow(/shard "model-00002-of-00003\.safetensors" listed in weight_map does not exist/);
    const warnings: string[] = [];
    for (const ck of [openCheckpointSync(dir, { backend, allowMissingShards: true, onWarning: (w) => warnings.push(w) }), await openCheckpoint(dir, { backend, allowMissingShards: true })]) {
      const layer1 = names.filter((n) => n.includes(".layers.1."));
      expect(ck.size).toBe(names.length - layer1.length);
      expect(ck.layerNumbers()).toEqual([0]);
      expect(ck.has("language_model.lm_head.weight")).toBe(true);
      expect(ck.has(layer1[0])).toBe(false);
      expect(() => ck.get(layer1[0])).toThrow(/the tensor is in shard "model-00002-of-00003\.safetensors", which is not on disk \(partial checkpoint\)/);
      expect(() => ck.get("no.such.tensor")).toThrow(/no tensor of this name/);
      expect(ck.warnings.join("\n")).toMatch(/1 of 3 shards are not on disk \(model-00002-of-00003\.safetensors\); their \d+ tensors are unavailable/);
      // The present shards are still cross-checked and readable.
      expect(ck.readSync("language_model.lm_head.weight").byteLength).toBe(16 * 8 * 2);
      ck.closeSync();
    }
    expect(warnings.length).toBe(1);
  });

  it("still cross-checks what is present, refuses unsafe names, and needs at least one shard", async () => {
    const dir = tempDir("partial-bad");
    writeTinyK3(dir);
    const { rmSync } = await import("node:fs");
    // A present shard that lost a tensor weight_map puts in it: still refused.
    const idx = JSON.parse(readFileSync(join(dir, "model.safetensors.index.json"), "utf8"));
    idx.weight_map["language_model.extra.weight"] = "model-00001-of-00003.safetensors";
    writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify(idx));
    expect(() => openCheckpointSync(dir, { backend, allowMissingShards: true })).toThrow(/weight_map puts this tensor in "model-00001-of-00003\.safetensors" but that shard does not hold it/);
    delete idx.weight_map["language_model.extra.weight"];
    idx.weight_map["language_model.x.weight"] = "../outside.safetensors";
    writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify(idx));
    expect(() => openCheckpointSync(dir, { backend, allowMissingShards: true })).toThrow(/refused/);
    delete idx.weight_map["language_model.x.weight"];
    writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify(idx));
    for (const f of readdirSync(dir).filter((f) => f.endsWith(".safetensors"))) rmSync(join(dir, f));
    expect(() => openCheckpointSync(dir, { backend, allowMissingShards: true })).toThrow(/none of the 3 shards weight_map lists is on disk/);
  });
});

describe.each(BACKENDS)("shards spread over several directories (shardDirs, %s)", (backend) => {
  it("finds each shard in the checkpoint directory or one of the extra ones; refuses none, two, and escapes", async () => {
    const { renameSync, copyFileSync, symlinkSync: link } = await import("node:fs");
    const dir = tempDir("spread");
    const drive2 = tempDir("drive2");
    const { names } = writeTinyK3(dir);
    renameSync(join(dir, "model-00002-of-00003.safetensors"), join(drive2, "model-00002-of-00003.safetensors"));
    expect(() => openCheckpointSync(dir, { backend })).toThrow(/shard "model-00002-of-00003\.safetensors" listed in weight_map does not exist/);
    for (const ck of [openCheckpointSync(dir, { backend, shardDirs: [drive2] }), await openCheckpoint(dir, { backend, shardDirs: [drive2] })]) {
      expect(ck.size).toBe(names.length);
      expect(ck.files[1]).toBe(join(drive2, "model-00002-of-00003.safetensors"));
      const t = ck.get(names.find((n) => n.includes(".layers.1."))!);
      expect(t.file).toBe(join(drive2, "model-00002-of-00003.safetensors"));
      expect(ck.readSync(t.name).byteLength).toBe(t.byteLength);
      ck.closeSync();
    }
    const drive3 = tempDir("drive3");
    expect(() => openCheckpointSync(dir, { backend, shardDirs: [drive3] })).toThrow(new RegExp(`does not exist \\(looked in ${dir.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}, ${drive3.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}\\)`));
    copyFileSync(join(drive2, "model-00002-of-00003.safetensors"), join(drive3, "model-00002-of-00003.safetensors"));
    expect(() => openCheckpointSync(dir, { backend, shardDirs: [drive2, drive3] })).toThrow(/is in both .*drive2.* and .*drive3.*: keep one copy/);
    // A symlink in an extra directory may not point out of it.
    const drive4 = tempDir("drive4");
    link(join(drive2, "model-00002-of-00003.safetensors"), join(drive4, "model-00002-of-00003.safetensors"));
    expect(() => openCheckpointSync(dir, { backend, shardDirs: [drive4] })).toThrow(/resolves outside .*drive4/);
    expect(() => openCheckpointSync(dir, { backend, shardDirs: [join(dir, "nope")] })).toThrow(/shard directory .*nope.* cannot be opened \(ENOENT\)/);
  });
});
