/**
 * @k3/engine: Kimi K3 and Kimi-Linear on one CPU. Config, model, generation, sampler, chat,
 * memory presets, the run report, the `k3` CLI and an OpenAI-compatible server.
 */
export * from "./errors.js";
export * from "./config.js";
export * from "./census.js";
export * from "./presets.js";
export * from "./sampler.js";
export * from "./report.js";
