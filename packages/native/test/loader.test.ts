import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { loadAddon, NativeLoadError } from "../src/index.js";

describe("loadAddon", () => {
  const made: string[] = [];
  afterAll(() => made.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

  it("names the package, the folder and the platform when nothing can be loaded", () => {
    const root = mkdtempSync(join(tmpdir(), "k3-native-"));
    made.push(root);
    mkdirSync(join(root, "src"));
    mkdirSync(join(root, "native"));
    const url = pathToFileURL(join(root, "src", "index.js")).href;
    let error: unknown;
    try {
      loadAddon("@k3/example", url);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(NativeLoadError);
    const message = (error as Error).message;
    expect(message).toContain("@k3/example");
    expect(message).toContain(join(root, "native"));
    expect(message).toContain(`${process.platform}-${process.arch}`);
  });

  it("says when the package has no native folder at all", () => {
    const root = mkdtempSync(join(tmpdir(), "k3-native-"));
    made.push(root);
    const url = pathToFileURL(join(root, "src", "index.js")).href;
    expect(() => loadAddon("@k3/example", url)).toThrow(/no native\/ folder/);
  });
});
