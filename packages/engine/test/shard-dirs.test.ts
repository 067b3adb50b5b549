/** `--shard-dirs`: a checkpoint spread over several directories runs and packs like the original. */
import { cpSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { TINY_K3, captureCli } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-spread-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const main = join(dir, "drive1");
const second = join(dir, "drive2");
cpSync(TINY_K3, main, { recursive: true });
cpSync(TINY_K3, second, { recursive: true, filter: (src) => src === TINY_K3 });
renameSync(join(main, "model-00002-of-00003.safetensors"), join(second, "model-00002-of-00003.safetensors"));

const RUN = ["run", "--prompt", "hello", "--max-tokens", "4", "--threads", "1", "--quiet"];

describe("--shard-dirs", () => {
  it("runs and packs a checkpoint whose shards sit in two directories, with the original's tokens", async () => {
    const [a, b] = [join(dir, "spread.json"), join(dir, "orig.json")];
    expect((await captureCli([...RUN, "--model", main, "--shard-dirs", second, "--json", a])).code).toBe(0);
    expect((await captureCli([...RUN, "--model", TINY_K3, "--json", b])).code).toBe(0);
    expect(JSON.parse(readFileSync(a, "utf8")).generated_ids).toEqual(JSON.parse(readFileSync(b, "utf8")).generated_ids);
    expect((await captureCli(["pack", "--model", main, "--shard-dirs", second, "--out", join(dir, "trunk")])).code).toBe(0);
    const c = join(dir, "streamed.json");
    expect((await captureCli([...RUN, "--model", main, "--shard-dirs", second, "--trunk", join(dir, "trunk"), "--trunk-gb", "0.0012", "--json", c])).code).toBe(0);
    expect(JSON.parse(readFileSync(c, "utf8")).generated_ids).toEqual(JSON.parse(readFileSync(b, "utf8")).generated_ids);
  });

  it("k3 doctor checks the shards of every directory", async () => {
    const r = await captureCli(["doctor", "--model", main, "--shard-dirs", second, "--probe-mb", "1"]);
    expect(r.stdout).toMatch(/3 shards, .*: every size matches its header/);
    expect((await captureCli(["doctor", "--model", main, "--probe-mb", "1"])).stdout).toMatch(/expected 3 shards \(from the file names\), found 2/);
  });

  it("without it the missing shard is named, with where it looked when given", async () => {
    expect((await captureCli([...RUN, "--model", main])).stderr).toMatch(/shard "model-00002-of-00003\.safetensors" listed in weight_map does not exist/);
    const r = await captureCli([...RUN, "--model", main, "--shard-dirs", join(dir, "nowhere")]);
    expect(r.code).toBe(5);
    expect(r.stderr).toMatch(/shard directory .*nowhere.* cannot be opened \(ENOENT\)/);
  });
});
