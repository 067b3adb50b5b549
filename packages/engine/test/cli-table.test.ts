/**
 * The `k3` option table: every flag a command takes appears in its help (with the default it
 * really uses), the parser refuses an unknown flag naming it, and the limits the issue found
 * drifting (chat's default, --threads past the pool's 256, the temperature cap) are one value.
 */
import { describe, expect, it } from "vitest";
import { COMMANDS } from "../src/cli/commands.js";
import { optionsOf } from "../src/cli/command.js";
import { commandHelp, optionLines } from "../src/cli/help.js";
import { DEFAULTS, MAX_TEMPERATURE, MAX_THREADS } from "../src/options.js";
import { captureCli } from "./helpers.js";

describe("k3 option table", () => {
  for (const entry of COMMANDS) {
    it(`${entry.name}: every flag it accepts is in its help, and an unknown flag is refused by name`, async () => {
      const command = await entry.load();
      const help = commandHelp(command);
      for (const [flag, spec] of optionsOf(command)) {
        if (flag === "help") continue;
        // The flag's own lines, with the default the parser fills in (the command's override, if any).
        expect(help, `--${flag} in k3 ${entry.name} --help`).toContain(optionLines(flag, spec) + "\n");
        if (spec.default !== undefined) expect(optionLines(flag, spec)).toContain(`(default ${spec.default})`);
      }
      // The help the CLI prints is this text.
      expect((await captureCli([entry.name, "--help"])).stdout).toBe(help);
      const r = await captureCli([entry.name, "--no-such-flag", "1"]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/Unknown option '--no-such-flag'/);
    });
  }

  it("chat's help gives the default it uses (512 tokens; it said 64)", async () => {
    const chat = (await captureCli(["chat", "--help"])).stdout;
    expect(chat).toMatch(new RegExp(`--max-tokens N +tokens to generate, 1\\.\\.4096 \\(default ${DEFAULTS.maxTokens.chat}\\)`));
    expect((await captureCli(["run", "--help"])).stdout).toMatch(new RegExp(`--max-tokens N .*\\(default ${DEFAULTS.maxTokens.run}\\)`));
  });

  it("--threads stops where the pool does (256; it took up to 1024 and the pool threw a RangeError)", async () => {
    const r = await captureCli(["run", "--threads", String(MAX_THREADS + 1), "--quiet"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--threads 257: expected an integer in 1\.\.256/);
    const env = process.env.K3_THREADS;
    process.env.K3_THREADS = "1024";
    try {
      expect((await captureCli(["run", "--quiet"])).stderr).toMatch(/--threads 1024: expected an integer in 1\.\.256/);
    } finally {
      if (env === undefined) delete process.env.K3_THREADS;
      else process.env.K3_THREADS = env;
    }
  });

  it("the temperature cap is the server's: 2 (the CLI took any number)", async () => {
    const r = await captureCli(["run", "--temperature", String(MAX_TEMPERATURE + 1), "--quiet"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/temperature = 3: expected a number in \[0, 2\]/);
  });

  it("a value that is not a number names the flag", async () => {
    const r = await captureCli(["chat", "--max-tokens", "lots"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--max-tokens lots: expected an integer in 1\.\.4096/);
  });
});
