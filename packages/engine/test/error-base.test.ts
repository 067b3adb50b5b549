/**
 * One error base: every package's error class extends @k3/native's PackageError, keeps its own name
 * and `instanceof`, and reports its package and code; a wrapped error rides along as `cause`.
 */
import { describe, expect, it } from "vitest";
import { PackageError } from "@k3/native";
import { SafetensorsError } from "@k3/safetensors";
import { DisallowedSpecialError, TokenizerError, UnknownTokenError, VocabularyError } from "@k3/tiktoken-bpe";
import { KdaError } from "@k3/kda";
import { MlaError } from "@k3/mla";
import { BudgetError, CheckpointError, ChecksumError, ExpertReadError, MoeStreamError, PackError, StoreStateError } from "@k3/moe-stream";
import { AbortError, ConfigError, HttpError, K3Error, NonFiniteError, StateFileError, UsageError, errorText, exitCodeOf } from "../src/index.js";

describe("every k3 error extends PackageError", () => {
  const inner = new Error("inner");
  const cases: [Error, string, string, string, (new (...a: never[]) => Error)[]][] = [
    [new SafetensorsError("HeaderTooLarge", "n too big", { cause: inner }), "SafetensorsError", "@k3/safetensors", "HeaderTooLarge", [SafetensorsError]],
    [new VocabularyError("bad rank file", { cause: inner }), "VocabularyError", "@k3/tiktoken-bpe", "vocabulary", [VocabularyError, TokenizerError]],
    [new DisallowedSpecialError("<|x|>"), "DisallowedSpecialError", "@k3/tiktoken-bpe", "disallowed-special", [DisallowedSpecialError, TokenizerError]],
    [new UnknownTokenError(9, 0), "UnknownTokenError", "@k3/tiktoken-bpe", "unknown-token", [UnknownTokenError, TokenizerError]],
    [new KdaError("weight", "A_log has 7 values"), "KdaError", "@k3/kda", "weight", [KdaError]],
    [new MlaError("cache", "full"), "MlaError", "@k3/mla", "cache", [MlaError]],
    [new BudgetError("arena", 2, 1), "BudgetError", "@k3/moe-stream", "budget", [BudgetError, MoeStreamError]],
    [new CheckpointError("a.safetensors", "truncated", { cause: inner }), "CheckpointError", "@k3/moe-stream", "checkpoint", [CheckpointError, MoeStreamError]],
    [new ExpertReadError(3, 7, 5, "EIO"), "ExpertReadError", "@k3/moe-stream", "read", [ExpertReadError, MoeStreamError]],
    [new ChecksumError("trunk.bin", "w", 1, 2), "ChecksumError", "@k3/moe-stream", "checksum", [ChecksumError, MoeStreamError]],
    [new PackError("disk full", "ENOSPC", { cause: inner }), "PackError", "@k3/moe-stream", "ENOSPC", [PackError, MoeStreamError]],
    [new PackError("source changed"), "PackError", "@k3/moe-stream", "pack", [PackError, MoeStreamError]],
    [new StoreStateError("closed"), "StoreStateError", "@k3/moe-stream", "state", [StoreStateError, MoeStreamError]],
    [new UsageError("--threads 0", { cause: inner }), "UsageError", "@k3/engine", "usage", [UsageError, K3Error]],
    [new ConfigError("config.json", ["hidden_size is missing"]), "ConfigError", "@k3/engine", "config", [ConfigError, K3Error]],
    [new StateFileError("s.k3st", "bad magic"), "StateFileError", "@k3/engine", "state-file", [StateFileError, K3Error]],
    [new NonFiniteError("layer 3"), "NonFiniteError", "@k3/engine", "non-finite", [NonFiniteError, K3Error]],
    [new AbortError(), "AbortError", "@k3/engine", "abort", [AbortError, K3Error]],
    [new HttpError(500, "internal error: inner", null, undefined, null, {}, { cause: inner }), "HttpError", "@k3/engine", "http", [HttpError]],
  ];
  it.each(cases.map((c) => [c[1], ...c] as const))("%s", (_label, err, name, pkg, code, classes) => {
    expect(err).toBeInstanceOf(PackageError);
    for (const cls of classes) expect(err).toBeInstanceOf(cls);
    const e = err as PackageError;
    expect([e.name, e.package, e.code]).toEqual([name, pkg, code]);
    if ("cause" in e) expect(e.cause).toBe(inner);
  });

  it("HttpError keeps OpenAI's wire type and code apart from the k3 code", () => {
    const e = new HttpError(400, "prompt too long", "messages", "invalid_request_error", "context_length_exceeded");
    expect([e.status, e.param, e.type, e.wireCode, e.code]).toEqual([400, "messages", "invalid_request_error", "context_length_exceeded", "http"]);
    expect([new HttpError(429, "busy").type, new HttpError(503, "down").type, new HttpError(404, "no").wireCode]).toEqual(["rate_limit_error", "server_error", null]);
  });

  it("errorText prints the cause chain once: a cause the message already quotes adds nothing", () => {
    const leaf = new Error("ENOENT: no such file or directory, open 'm.json'");
    // The usual wrapper quotes its cause: the CLI prints one line, as before.
    expect(errorText(new UsageError(`m.json: ${leaf.message}`, { cause: leaf }))).toBe("m.json: ENOENT: no such file or directory, open 'm.json'");
    // A wrapper that summarises its cause (an errno code) gets the cause's own line, once per level.
    const mid = new UsageError("--manifest m.json: ENOENT", { cause: leaf });
    expect(errorText(new Error("verify failed", { cause: mid }))).toBe(
      "verify failed\n  caused by: --manifest m.json: ENOENT\n  caused by: ENOENT: no such file or directory, open 'm.json'",
    );
    // A non-Error cause and a cycle end the chain.
    const loop = new Error("a", { cause: "b" });
    expect(errorText(loop)).toBe("a\n  caused by: b");
    const self: Error & { cause?: unknown } = new Error("self");
    self.cause = self;
    expect(errorText(self)).toBe("self");
  });

  it("keeps the engine's exit codes on its errors", () => {
    expect(exitCodeOf(new UsageError("x"))).toBe(2);
    expect(exitCodeOf(new ConfigError("config.json", ["x"]))).toBe(3);
    expect(exitCodeOf(new NonFiniteError("x"))).toBe(1);
  });
});
