/** `k3 serve`: the OpenAI-compatible HTTP server, the model in a worker thread. */
import { EXIT_OK, UsageError } from "../errors.js";
import type { Args, Command } from "./command.js";
import { EMBEDDED_CHAT_NOTE, EMBEDDED_NOTE, modelDir } from "./model-dir.js";
import { engineOptions } from "./shared.js";
import { MODEL_FLAGS, OPTIONS } from "./table.js";

export const command: Command = {
  usage: "usage: k3 serve [--host 127.0.0.1] [--port 8080] [--queue 8] [--prompt-cache 1] [--prompt-cache-mb 1024] [options]",
  about: `OpenAI-compatible server: POST /v1/chat/completions, POST /v1/completions (JSON or "stream": true
SSE), GET /v1/models and /v1/models/{id}, GET /health, GET /metrics (Prometheus text: requests,
queue depth, tokens, prefill/decode tok/s, bytes read by source, expert hit rate, drops, RSS), and
a chat page at / (self-contained, works offline; --no-web-ui turns it off). Binds loopback unless
--host says otherwise. One generation runs at a time in a worker thread; --queue more may wait,
the rest get 429.

Any web page the user opens can send requests to this server, so: a request whose Host is not
localhost, 127.0.0.1, [::1] or the bound address (at the bound port) gets 403 (DNS rebinding); a
request with an Origin other than the server's own gets 403; a POST that is not
Content-Type: application/json gets 415.

Also implemented: logprobs / top_logprobs, n (1..8), presence/frequency_penalty, logit_bias, seed,
stop, and response_format json_object / json_schema (constrained decoding; see the engine README).
Request defaults follow OpenAI's: temperature 1, max_tokens 256 (k3 run and chat are greedy).
Parameters that would change the reply but are not implemented get a 400 naming them, never
silently ignored: tools / tool_choice and tool messages, unsupported JSON Schema keywords; echo /
best_of / suffix on completions. role "developer" is taken as "system".
A 429 carries Retry-After. A busy --port exits 2 naming the address.`,
  sections: [
    { options: ["host", "port", "queue", "allow-host", "cors", "api-key", "no-web-ui", "prompt-cache", "prompt-cache-mb"] },
    { title: "model and memory:", options: MODEL_FLAGS },
  ],
  run,
};

async function run(args: Args): Promise<number> {
  const values = args.values;
  const { WorkerBackend } = await import("../backend.js");
  const { startServer } = await import("../server.js");
  // $K3_API_KEY passes the same check as the flag.
  const apiKey: string | undefined = values["api-key"] ?? (process.env.K3_API_KEY ? OPTIONS["api-key"].parse(process.env.K3_API_KEY, "--api-key") : undefined);
  const { dir, embedded } = modelDir(values);
  if (embedded) process.stderr.write(EMBEDDED_NOTE + "\n" + EMBEDDED_CHAT_NOTE + "\n");
  const { log: _log, onLoadProgress: _progress, ...options } = engineOptions(args, () => {});
  const backend = await WorkerBackend.start({ dir, options: { ...options, promptCache: { slots: values["prompt-cache"], maxBytes: values["prompt-cache-mb"] * 2 ** 20 } } });
  backend.onLog = (l) => process.stderr.write(l + "\n");
  process.stderr.write(backend.plan);
  const host: string = values.host;
  const port: number = values.port;
  let server;
  try {
    server = await startServer(backend, {
      host,
      port,
      maxQueue: values.queue,
      webUi: !values["no-web-ui"],
      allowHosts: values["allow-host"],
      corsOrigins: values.cors,
      apiKey,
      log: (l) => process.stderr.write(l + "\n"),
    });
  } catch (err) {
    await backend.close();
    const code = (err as { code?: string }).code;
    if (code === "EADDRINUSE" || code === "EACCES" || code === "EADDRNOTAVAIL") {
      throw new UsageError(`k3 serve: cannot listen on ${host.includes(":") ? `[${host}]` : host}:${port}: ${code === "EADDRINUSE" ? "the address is already in use (another server? pick another --port)" : code === "EACCES" ? "permission denied (ports below 1024 need privileges)" : "no such local address (--host)"}`);
    }
    throw err;
  }
  process.stderr.write(`serving ${backend.modelId} at ${server.url}/v1${values["no-web-ui"] ? "" : `; chat page at ${server.url}/`} (Ctrl-C to stop)\n`);
  await new Promise<void>((res) => {
    const stop = () => res();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  await server.close();
  await backend.close();
  return EXIT_OK;
}
