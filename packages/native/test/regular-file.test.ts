import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FileRefusedError, readRegularFileSync, readRegularTextSync } from "../src/index.js";

const dir = mkdtempSync(join(tmpdir(), "k3-regular-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function refusal(file: string, max = 1 << 20): FileRefusedError {
  try {
    readRegularFileSync(file, max);
  } catch (err) {
    expect(err).toBeInstanceOf(FileRefusedError);
    return err as FileRefusedError;
  }
  throw new Error("expected a refusal");
}

describe("readRegularFileSync", () => {
  it("reads a regular file whole", () => {
    writeFileSync(join(dir, "a.json"), '{"a":1}');
    expect(new TextDecoder().decode(readRegularFileSync(join(dir, "a.json"), 100))).toBe('{"a":1}');
    expect(readRegularTextSync(join(dir, "a.json"), 100)).toBe('{"a":1}');
  });

  it("refuses a FIFO without hanging, a device, a directory, a too-large file and a missing one", () => {
    const fifo = join(dir, "fifo");
    execFileSync("mkfifo", [fifo]);
    expect(refusal(fifo)).toMatchObject({ code: "ENOTREG", message: expect.stringMatching(/FIFO/) });
    symlinkSync("/dev/zero", join(dir, "zero"));
    expect(refusal(join(dir, "zero"))).toMatchObject({ code: "ENOTREG", message: expect.stringMatching(/character device/) });
    expect(refusal(dir).code).toBe("ENOTREG");
    writeFileSync(join(dir, "big"), Buffer.alloc(101));
    expect(refusal(join(dir, "big"), 100)).toMatchObject({ code: "EFBIG", message: expect.stringMatching(/101 bytes/) });
    expect(refusal(join(dir, "none")).code).toBe("ENOENT");
  });
});
