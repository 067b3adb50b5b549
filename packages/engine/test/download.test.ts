/** `k3 download` against a local mock of the hub API: pinning, resume, range-less servers, corruption, space, refusals. */
import { createHash } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { downloadCheckpoint } from "../src/download.js";
import { Engine } from "../src/engine.js";
import { TINY_K3, captureCli } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-dl-"));
const SHA = "0123456789abcdef0123456789abcdef01234567";
const REPO = "moonshotai/tiny-k3";
const files = readdirSync(TINY_K3)
  .filter((f) => !f.startsWith("expected"))
  .map((name) => {
    const bytes = readFileSync(join(TINY_K3, name));
    return { name, bytes, lfs: name.endsWith(".safetensors") || name === "tiktoken.model" };
  });

/** What the mock does; tests flip these. */
const mode = { ignoreRange: false, corrupt: "", status: 0, rangeRequests: 0, auth: "" as string | undefined, evil: "" };
let server: Server;
let endpoint = "";

beforeAll(async () => {
  server = createServer((req, res) => {
    mode.auth = req.headers.authorization;
    if (mode.status) return void res.writeHead(mode.status).end();
    const url = new URL(req.url!, "http://x");
    const api = url.pathname.match(/^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/);
    if (api) {
      if (api[1] !== REPO || !["main", SHA].includes(decodeURIComponent(api[2]))) return void res.writeHead(404).end();
      const siblings = files.map((f) => (f.lfs ? { rfilename: f.name, size: f.bytes.length, lfs: { sha256: createHash("sha256").update(f.bytes).digest("hex"), size: f.bytes.length } } : { rfilename: f.name, size: f.bytes.length }));
      if (mode.evil) siblings.push({ rfilename: mode.evil, size: 1 });
      res.writeHead(200, { "content-type": "application/json" });
      return void res.end(JSON.stringify({ id: REPO, sha: SHA, siblings }));
    }
    // The hub redirects file downloads to a CDN.
    const resolved = url.pathname.match(/^\/([^/]+\/[^/]+)\/resolve\/([0-9a-f]{40})\/(.+)$/);
    if (resolved) return void res.writeHead(302, { location: `/cdn/${resolved[3]}` }).end();
    const cdn = url.pathname.match(/^\/cdn\/(.+)$/);
    const f = cdn && files.find((x) => x.name === decodeURIComponent(cdn[1]));
    if (!f) return void res.writeHead(404).end();
    let body = f.bytes;
    if (mode.corrupt === f.name) {
      body = Buffer.from(body);
      body[body.length >> 1] ^= 1;
    }
    const range = req.headers.range?.match(/^bytes=(\d+)-$/);
    if (range && !mode.ignoreRange) {
      mode.rangeRequests++;
      const from = Number(range[1]);
      if (from >= body.length) return void res.writeHead(416).end();
      res.writeHead(206, { "content-range": `bytes ${from}-${body.length - 1}/${body.length}`, "content-length": body.length - from });
      return void res.end(body.subarray(from));
    }
    res.writeHead(200, { "content-length": body.length });
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

const same = (target: string) => files.every((f) => existsSync(join(target, f.name)) && readFileSync(join(target, f.name)).equals(f.bytes));

describe("k3 download", () => {
  it("fetches every file at the pinned commit, verified, and the result runs", async () => {
    const target = join(dir, "full");
    const r = await captureCli(["download", REPO, "--dir", target, "--endpoint", endpoint, "--token", "hf_secret"]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`${REPO} @ ${SHA} \\(main\\): ${files.length} files`));
    expect(r.stderr).toMatch(/3 of 3 shards present/);
    expect(mode.auth).toBe("Bearer hf_secret");
    expect(same(target)).toBe(true);
    expect(readdirSync(target).some((f) => f.endsWith(".part"))).toBe(false);
    const state = JSON.parse(readFileSync(join(target, ".k3-download.json"), "utf8"));
    expect(state.sha).toBe(SHA);
    // Every file's sha256 is recorded, the non-LFS ones (config.json, ...) too, and k3 verify agrees.
    for (const f of files) expect(state.complete[f.name]).toBe(createHash("sha256").update(f.bytes).digest("hex"));
    const v = await captureCli(["verify", "--model", target]);
    expect(v.code).toBe(0);
    expect(v.stdout).toMatch(new RegExp(`${files.length} of ${files.length} files match their sha256`));
    const engine = await Engine.load(target, { threads: 1 });
    expect((await engine.complete(engine.encodeText("hi"), { maxTokens: 2 })).ids.length).toBeGreaterThan(0);
    engine.close();
    // A rerun finds everything in place and fetches nothing.
    const again = await downloadCheckpoint({ repo: REPO, dir: target, endpoint });
    expect([again.fetchedBytes, again.resumedBytes]).toEqual([0, files.reduce((a, f) => a + f.bytes.length, 0)]);
  });

  it("resumes a cut file with a range request, and restarts it on a server that ignores ranges", async () => {
    for (const ignoreRange of [false, true]) {
      const target = join(dir, `resume-${ignoreRange}`);
      const big = files.find((f) => f.name === "model-00001-of-00003.safetensors")!;
      await downloadCheckpoint({ repo: REPO, dir: target, endpoint, include: ["*.json"] });
      writeFileSync(join(target, `${big.name}.part`), big.bytes.subarray(0, 100_000));
      mode.ignoreRange = ignoreRange;
      mode.rangeRequests = 0;
      const r = await downloadCheckpoint({ repo: REPO, dir: target, endpoint });
      mode.ignoreRange = false;
      expect(same(target)).toBe(true);
      if (!ignoreRange) {
        expect(mode.rangeRequests).toBe(1);
        expect(r.fetchedBytes).toBe(files.filter((f) => !f.name.endsWith(".json")).reduce((a, f) => a + f.bytes.length, 0) - 100_000);
      }
    }
  });

  it("a file whose sha256 does not match is kept aside and fails the run (exit 5, io), naming it; the rerun fixes it", async () => {
    const target = join(dir, "corrupt");
    mode.corrupt = "model-00002-of-00003.safetensors";
    const r = await captureCli(["download", REPO, "--dir", target, "--endpoint", endpoint]);
    mode.corrupt = "";
    expect(r.code).toBe(5);
    expect(r.stderr).toMatch(/model-00002-of-00003\.safetensors: sha256 [0-9a-f]{64} but the hub lists [0-9a-f]{64}; the bytes were kept as model-00002-of-00003\.safetensors\.part\.bad/);
    expect(existsSync(join(target, "model-00002-of-00003.safetensors"))).toBe(false);
    expect((await captureCli(["download", REPO, "--dir", target, "--endpoint", endpoint])).code).toBe(0);
    expect(same(target)).toBe(true);
  });

  it("--verify full re-hashes what is on disk and refetches a file damaged after download", async () => {
    const target = join(dir, "full");
    const f = files.find((x) => x.name === "model-00003-of-00003.safetensors")!;
    const damaged = Buffer.from(f.bytes);
    damaged[10] ^= 0xff;
    writeFileSync(join(target, f.name), damaged);
    const plain = await downloadCheckpoint({ repo: REPO, dir: target, endpoint });
    expect(plain.fetchedBytes).toBe(0); // trusted by size, as recorded
    const full = await downloadCheckpoint({ repo: REPO, dir: target, endpoint, verify: "full" });
    expect(full.fetchedBytes).toBe(f.bytes.length);
    expect(same(target)).toBe(true);
  });

  it("refuses too little space, another revision in the same directory, unsafe names and bad answers", async () => {
    await expect(downloadCheckpoint({ repo: REPO, dir: join(dir, "space"), endpoint, freeBytes: 1e6 })).rejects.toThrow(/still to fetch \(\+ 1 GiB margin\) but .* has 1\.00 MB free/);
    const pinned = join(dir, "full");
    await expect(downloadCheckpoint({ repo: REPO, dir: pinned, endpoint, revision: "f".repeat(40) })).rejects.toThrow(/HTTP 404/);
    writeFileSync(join(pinned, ".k3-download.json"), JSON.stringify({ repo: REPO, sha: "a".repeat(40), complete: {} }));
    await expect(downloadCheckpoint({ repo: REPO, dir: pinned, endpoint, revision: "main" })).rejects.toThrow(/was started at a{40}; main is 0123/);
    await expect(downloadCheckpoint({ repo: "other/repo", dir: pinned, endpoint })).rejects.toThrow(/holds moonshotai\/tiny-k3, not other\/repo/);
    mode.status = 401;
    await expect(downloadCheckpoint({ repo: REPO, dir: join(dir, "auth"), endpoint })).rejects.toThrow(/HTTP 401: the repository needs a token/);
    mode.status = 0;
    for (const evil of ["../escape", "/etc/passwd", "a/../../b"]) {
      mode.evil = evil;
      await expect(downloadCheckpoint({ repo: REPO, dir: join(dir, "evil"), endpoint })).rejects.toThrow(/has an unsafe or missing name/);
    }
    mode.evil = "";
    expect(existsSync(join(dir, "escape"))).toBe(false);
    expect((await captureCli(["download", "not a repo", "--dir", join(dir, "x"), "--endpoint", endpoint])).stderr).toMatch(/is not a repository name/);
    expect((await captureCli(["download", REPO])).stderr).toMatch(/--dir DIR is required/);
    expect((await captureCli(["download", REPO, "--dir", join(dir, "y"), "--endpoint", "http://127.0.0.1:1"])).code).toBe(5);
  });
});
