/** `k3 verify`: hashes against the download's record or a manifest, names bad/missing files, resumes. */
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, unlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runDoctor } from "../src/doctor.js";
import { verifyCheckpoint } from "../src/verify.js";
import { TINY_K3, captureCli } from "./helpers.js";

const root = mkdtempSync(join(tmpdir(), "k3-verify-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const names = readdirSync(TINY_K3).filter((f) => !f.startsWith("expected")).sort();
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const SHARD = "model-00002-of-00003.safetensors";
const totalBytes = names.reduce((a, n) => a + readFileSync(join(TINY_K3, n)).length, 0);

/** A copy of the tiny checkpoint with a download record holding every file's sha256. */
function checkpoint(tag: string): string {
  const dir = join(root, tag);
  mkdirSync(dir, { recursive: true });
  const complete: Record<string, string> = {};
  for (const n of names) {
    copyFileSync(join(TINY_K3, n), join(dir, n));
    complete[n] = sha(readFileSync(join(TINY_K3, n)));
  }
  writeFileSync(join(dir, ".k3-download.json"), JSON.stringify({ repo: "moonshotai/tiny-k3", sha: "0".repeat(40), complete }));
  return dir;
}

/** Flips one byte in the middle of a file (the data of a tensor, not its header). */
function flip(file: string): void {
  const b = readFileSync(file);
  b[b.length >> 1] ^= 0x10;
  writeFileSync(file, b);
}

describe("k3 verify", () => {
  it("passes an intact checkpoint against the download's record", async () => {
    const dir = checkpoint("ok");
    const r = await captureCli(["verify", "--model", dir]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^${names.length} of ${names.length} files match their sha256; hashed ${(totalBytes / 1e6).toFixed(2)} MB`, "m"));
  });

  it("one flipped byte: exit 5 (io) naming the shard and the tensors it holds", async () => {
    const dir = checkpoint("flipped");
    flip(join(dir, SHARD));
    const r = await captureCli(["verify", "--model", dir, "--threads", "2"]);
    expect(r.code).toBe(5);
    expect(r.stdout).toMatch(new RegExp(`^BAD +${SHARD}: sha256 [0-9a-f]{64}, expected ${sha(readFileSync(join(TINY_K3, SHARD)))}; it holds \\d+ tensor\\(s\\): (language_model\\.)?model\\.layers\\.`, "m"));
    expect(r.stderr).toMatch(new RegExp(`1 file\\(s\\) bad or missing: ${SHARD}`));
  });

  it("a missing file and a SHA256SUMS manifest", async () => {
    const dir = checkpoint("missing");
    unlinkSync(join(dir, "tiktoken.model"));
    const sums = join(root, "SHA256SUMS");
    writeFileSync(sums, names.map((n) => `${sha(readFileSync(join(TINY_K3, n)))}  ${n}`).join("\n") + "\n");
    const r = await captureCli(["verify", "--model", dir, "--manifest", sums]);
    expect(r.code).toBe(5);
    expect(r.stdout).toMatch(/^MISSING +tiktoken\.model$/m);
    expect(r.stderr).toMatch(/bad or missing: tiktoken\.model/);
  });

  it("nothing to compare with, or a malformed manifest: exit 2 saying so", async () => {
    const dir = checkpoint("norecord");
    unlinkSync(join(dir, ".k3-download.json"));
    const r = await captureCli(["verify", "--model", dir]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/has no record of its files' hashes .*give --manifest FILE/);
    const bad = join(root, "bad-sums");
    writeFileSync(bad, "abc  config.json\n");
    const m = await captureCli(["verify", "--model", dir, "--manifest", bad]);
    expect(m.code).toBe(2);
    expect(m.stderr).toMatch(/bad-sums, line 1: expected '<64 hex digits>  <file name>'/);
    expect((await captureCli(["verify", "--model", dir, "--bogus"])).code).toBe(2);
  });

  it("resumes: a rerun skips files already verified, re-hashes a file that changed since", async () => {
    const dir = checkpoint("resume");
    const first = await verifyCheckpoint({ dir });
    expect([first.hashedBytes, first.resumedBytes]).toEqual([totalBytes, 0]);
    const again = await verifyCheckpoint({ dir });
    expect([again.hashedBytes, again.resumedBytes]).toEqual([0, totalBytes]);
    expect(again.files.every((f) => f.status === "ok" && f.resumed)).toBe(true);
    // Rewritten (new mtime), now corrupt: hashed again and found.
    flip(join(dir, SHARD));
    utimesSync(join(dir, SHARD), new Date(), new Date(Date.now() + 5000));
    const third = await verifyCheckpoint({ dir });
    expect(third.hashedBytes).toBe(readFileSync(join(dir, SHARD)).length);
    expect(third.files.find((f) => f.name === SHARD)!.status).toBe("bad");
    // --restart ignores the state.
    expect((await verifyCheckpoint({ dir, restart: true })).hashedBytes).toBe(totalBytes);
  });

  it("an interrupted run keeps the files it finished and the next run continues from them", async () => {
    const dir = checkpoint("interrupt");
    const ac = new AbortController();
    const cut = await verifyCheckpoint({
      dir,
      threads: 1,
      blockBytes: 64 << 10,
      signal: ac.signal,
      // Abort once the first (largest) file is done and the second is under way.
      onProgress: (p) => p.bytesDone > readFileSync(join(dir, "model-00001-of-00003.safetensors")).length + (64 << 10) && ac.abort(),
    });
    expect(cut.interrupted).toBe(true);
    const finished = cut.files.filter((f) => f.status === "ok").length;
    expect(finished).toBeGreaterThanOrEqual(1);
    expect(finished).toBeLessThan(names.length);
    const state = JSON.parse(readFileSync(join(dir, ".k3-verify.json"), "utf8"));
    expect(Object.keys(state.files)).toHaveLength(finished);
    const rest = await verifyCheckpoint({ dir });
    expect(rest.interrupted).toBe(false);
    expect(rest.resumedBytes).toBeGreaterThan(0);
    expect(rest.hashedBytes + rest.resumedBytes).toBe(totalBytes);
    expect(rest.files.every((f) => f.status === "ok")).toBe(true);
  });

  it("k3 doctor says when the bytes were never verified, and when they were", async () => {
    const dir = checkpoint("doctor");
    const lines = async () => {
      const out: string[] = [];
      await runDoctor({ dir, probeBytes: 1e6, out: (l) => out.push(l) });
      return out.join("\n");
    };
    expect(await lines()).toMatch(/warn  the checkpoint's bytes have never been verified: k3 verify --model /);
    await verifyCheckpoint({ dir });
    expect(await lines()).toMatch(new RegExp(`ok {4}k3 verify checked ${names.length} file\\(s\\) \\(last \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC\\)`));
  });
});

