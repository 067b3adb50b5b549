/**
 * `k3 chat` and Ctrl-C, driven through a pipe (no pty): SIGINT during a reply stops the reply and
 * keeps the REPL (the partial reply closed in the conversation, said on screen), SIGINT at the
 * prompt exits 0; the input history is kept beside the state file and read back by --load.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const CLI = join(__dirname, "..", "src", "cli.ts");
const dir = mkdtempSync(join(tmpdir(), "k3-chat-int-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function chat(args: string[]): { child: ChildProcessWithoutNullStreams; out: () => string; waitFor: (re: RegExp, from?: number) => Promise<RegExpMatchArray>; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ["--import", "tsx", CLI, "chat", ...args], { env: { ...process.env, K3_THREADS: "1" }, cwd: join(__dirname, "..") });
  let stdout = "";
  const waiters: (() => void)[] = [];
  child.stdout.on("data", (d) => {
    stdout += String(d);
    waiters.splice(0).forEach((w) => w());
  });
  child.stderr.on("data", () => {});
  const exited = new Promise<number | null>((res) => child.on("exit", (code) => (waiters.splice(0).forEach((w) => w()), res(code))));
  const waitFor = (re: RegExp, from = 0) =>
    new Promise<RegExpMatchArray>((res, rej) => {
      const check = () => {
        const m = stdout.slice(from).match(re);
        if (m) return res(m);
        if (child.exitCode !== null || child.signalCode !== null) return rej(new Error(`k3 chat exited (${child.exitCode ?? child.signalCode}) before ${re}; stdout:\n${stdout}`));
        waiters.push(check);
      };
      check();
    });
  return { child, out: () => stdout, waitFor, exited };
}

describe("k3 chat: Ctrl-C", () => {
  it("the first Ctrl-C stops the reply and keeps the conversation; at the prompt it exits 0; history beside the state", async () => {
    const state = join(dir, "talk.k3st");
    const c = chat(["--max-tokens", "4000"]);
    c.child.stdin.write("hello\n");
    await c.waitFor(/\S{20}/); // the reply is streaming
    c.child.kill("SIGINT");
    const stopped = await c.waitFor(/\[stopped by Ctrl-C after (\d+) tokens: the partial reply is kept as the assistant's turn, closed; the next turn re-reads the conversation\]/);
    expect(Number(stopped[1])).toBeGreaterThan(0);
    expect(Number(stopped[1])).toBeLessThan(4000);
    // Still running, and the conversation goes on: a second turn, stopped too.
    const mark = c.out().length;
    c.child.stdin.write("again\n");
    await c.waitFor(/\S{20}/, mark);
    c.child.kill("SIGINT");
    await c.waitFor(/\[stopped by Ctrl-C after \d+ tokens/, mark);
    c.child.stdin.write(`/save ${state}\n`);
    await c.waitFor(/\(saved to .*talk\.k3st\)\n\(input history in .*talk\.k3st\.history\)/);
    c.child.kill("SIGINT"); // at the prompt
    expect(await c.exited).toBe(0);
    expect(c.out()).toMatch(/\(Ctrl-C at the prompt: exit\)/);
    expect(readFileSync(`${state}.history`, "utf8")).toBe(`hello\nagain\n/save ${state}\n`);

    // The saved conversation holds both closed turns; --load reads the history back and extends it.
    const d = chat(["--load", state]);
    d.child.stdin.end("/exit\n");
    expect(await d.exited).toBe(0);
    expect(readFileSync(`${state}.history`, "utf8")).toBe(`hello\nagain\n/save ${state}\n/exit\n`);
    const e = chat(["--load", state]);
    e.child.stdin.end("/load " + state + "\n/exit\n");
    await e.waitFor(/\(loaded 4 messages\)/);
    expect(await e.exited).toBe(0);
  });
});
