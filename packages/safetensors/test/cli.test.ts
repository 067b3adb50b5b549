// The k3-safetensors command line: --help exits 0, unknown flags/commands are refused (exit 2, named).
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { main } from "../src/cli.js";
import { fileOf, tempDir } from "./helpers.js";

const dir = tempDir("cli");
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = join(dir, "one.safetensors");
writeFileSync(file, fileOf('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', 8));

let out: string[] = [], err: string[] = [];
beforeEach(() => {
  out = [];
  err = [];
  vi.spyOn(console, "log").mockImplementation((m: unknown) => void out.push(String(m)));
  vi.spyOn(console, "error").mockImplementation((m: unknown) => void err.push(String(m)));
});
afterEach(() => vi.restoreAllMocks());

describe("k3-safetensors CLI", () => {
  it("--help and -h print the usage to stdout and exit 0", async () => {
    expect(await main(["--help"])).toBe(0);
    expect(out.join("\n")).toMatch(/^usage: k3-safetensors inspect/);
    expect(await main(["inspect", "-h"])).toBe(0);
  });

  it("refuses unknown flags, naming them (was silently accepted)", async () => {
    expect(await main(["inspect", file, "--jsn"])).toBe(2);
    expect(err.join("\n")).toMatch(/--jsn/);
  });

  it("refuses an unknown command, a missing path, extra arguments and a bad --backend", async () => {
    expect(await main(["inspct", file])).toBe(2);
    expect(err.pop()).toMatch(/unknown command 'inspct'/);
    expect(await main(["verify"])).toBe(2);
    expect(err.pop()).toMatch(/missing <file\|dir>/);
    expect(await main(["verify", file, "extra"])).toBe(2);
    expect(err.pop()).toMatch(/unexpected argument 'extra'/);
    expect(await main(["get", file])).toBe(2);
    expect(err.pop()).toMatch(/missing <tensor-name>/);
    expect(await main(["verify", file, "--backend", "gpu"])).toBe(2);
    expect(err.pop()).toMatch(/--backend 'gpu': expected native or ts/);
    expect(await main(["verify", file, "--json"])).toBe(2);
    expect(err.pop()).toMatch(/--json applies to inspect only/);
  });

  it("still runs inspect --json, verify and get, with the flags anywhere", async () => {
    expect(await main(["--json", "inspect", file, "--backend", "ts"])).toBe(0);
    expect(JSON.parse(out.join("\n"))).toBeTypeOf("object");
    out = [];
    expect(await main(["verify", file])).toBe(0);
    expect(out[0]).toMatch(/^ok: .*1 tensors/);
    out = [];
    expect(await main(["get", file, "w"])).toBe(0);
    expect(JSON.parse(out.join("\n")).dtype).toBe("F32");
    expect(await main(["inspect", join(dir, "absent.safetensors")])).toBe(1);
  });
});
