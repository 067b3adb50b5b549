/**
 * The OpenAI-compatible server of @k3/engine, started in-process on a free loopback port and called
 * with plain fetch. Uses $K3_MODEL_DIR when set, else the embedded tiny K3 (trained on the Rust book, not on chat).
 * The same server runs from the command line as `k3 serve --model DIR --port 8080`.
 */
import { embeddedModelDir, startServer, WorkerBackend } from "@k3/engine";

const quick = process.argv.includes("--quick");
const dir = process.env.K3_MODEL_DIR ?? embeddedModelDir();
const backend = await WorkerBackend.start({ dir, options: { preset: "auto", threads: 1 } });
const server = await startServer(backend, { port: 0 });
console.log(`serving ${backend.modelId} at ${server.url}/v1${process.env.K3_MODEL_DIR ? "" : " (embedded tiny K3: trained on the Rust book, not on chat)"}`);

try {
  const models = await (await fetch(`${server.url}/v1/models`)).json();
  console.log("GET /v1/models →", models.data.map((m: { id: string }) => m.id));

  const body = { messages: [{ role: "user", content: "Say hello." }], max_tokens: quick ? 6 : 32, temperature: 0 };
  const res = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const json = await res.json();
  // K3 thinks first: its reasoning arrives in reasoning_content, the answer in content (the tiny
  // random model rarely leaves its thinking, so content is often empty: print both channels).
  const message = json.choices[0].message;
  console.log("POST /v1/chat/completions →", { reasoning_content: message.reasoning_content ?? "", content: message.content }, json.usage);

  const stream = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: true }) });
  process.stdout.write("streamed (reasoning in [brackets]): ");
  const decoder = new TextDecoder();
  let buffered = "";
  let done = false;
  for await (const chunk of stream.body!) {
    buffered += decoder.decode(chunk, { stream: true });
    let cut;
    while ((cut = buffered.indexOf("\n\n")) >= 0) {
      const event = buffered.slice(0, cut).replace(/^data: /, "");
      buffered = buffered.slice(cut + 2);
      if (event === "[DONE]") done = true;
      else {
        const delta = JSON.parse(event).choices[0].delta;
        if (delta.reasoning_content) process.stdout.write(`[${delta.reasoning_content}]`);
        if (delta.content) process.stdout.write(delta.content);
      }
    }
  }
  console.log(done ? "\n[DONE]" : "\n(stream ended without [DONE])");

  const bad = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ messages: [{ role: "robot", content: "x" }] }) });
  console.log(`a bad request → ${bad.status}`, (await bad.json()).error.message);
  if (!done || bad.status !== 400) process.exitCode = 1;
} finally {
  await server.close();
  await backend.close();
}
