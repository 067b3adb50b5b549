import { describe, expect, it } from "vitest";
import { FileRefusedError, NativeLoadError, PackageError, readRegularFileSync } from "../src/index.js";

describe("PackageError, the base of every k3 error", () => {
  it("carries package, code and the wrapped error as cause; the message is the caller's", () => {
    const inner = new Error("disk on fire");
    const e = new PackageError("@k3/example", "io", "reading x failed", { cause: inner });
    expect(e).toBeInstanceOf(Error);
    expect([e.name, e.package, e.code, e.message]).toEqual(["PackageError", "@k3/example", "io", "reading x failed"]);
    expect(e.cause).toBe(inner);
    expect("cause" in new PackageError("@k3/example", "io", "no cause")).toBe(false);
  });

  it("subclasses keep their own name and instanceof, and are PackageErrors", () => {
    const load = new NativeLoadError("@k3/example", "/nowhere/native", new Error("ENOENT"));
    expect(load).toBeInstanceOf(NativeLoadError);
    expect(load).toBeInstanceOf(PackageError);
    expect([load.name, load.package, load.code]).toEqual(["NativeLoadError", "@k3/example", "load"]);
    expect((load.cause as Error).message).toBe("ENOENT");

    let refused: unknown;
    try {
      readRegularFileSync("/nonexistent/k3-native-test", 10);
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(FileRefusedError);
    expect(refused).toBeInstanceOf(PackageError);
    const r = refused as FileRefusedError;
    expect([r.name, r.package, r.code, r.file]).toEqual(["FileRefusedError", "@k3/native", "ENOENT", "/nonexistent/k3-native-test"]);
    expect((r.cause as NodeJS.ErrnoException).code).toBe("ENOENT");
  });
});
