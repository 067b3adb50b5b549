/**
 * `GET /metrics` of `k3 serve`: counters and gauges in the Prometheus text exposition format
 * (version 0.0.4), so a scraper sees load, throughput, I/O and memory without parsing logs.
 */
import type { RunReport } from "./report.js";
import type { CompletionResult, CompletionStats } from "./server.js";

/** The content type Prometheus expects for the text format. */
export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

const SOURCES = ["trunk", "experts", "embed_head"] as const;

/** What /metrics takes from one generation's run report. */
export function completionStats(r: RunReport): CompletionStats {
  return {
    prefillTokensPerSecond: r.prefill_tokens_per_second,
    decodeTokensPerSecond: r.decode_tokens_per_second,
    bytesRead: { trunk: r.bytes_read.trunk, experts: r.bytes_read.experts, embedHead: r.bytes_read.embed_head },
    expertRequests: r.expert_requests,
    expertResidentHits: Math.round((r.resident_hit_rate ?? 0) * r.expert_requests),
  };
}

export class ServerMetrics {
  private readonly requests = new Map<string, number>();
  private promptTokens = 0;
  private completionTokens = 0;
  private cachedTokens = 0;
  private expertDrops = 0;
  private expertRequests = 0;
  private expertResidentHits = 0;
  private readonly bytesRead = { trunk: 0, experts: 0, embed_head: 0 };
  private lastPrefillTps = 0;
  private lastDecodeTps = 0;

  /** One answered request (any route, any status). */
  countRequest(route: string, status: number): void {
    const key = `route="${route}",status="${status}"`;
    this.requests.set(key, (this.requests.get(key) ?? 0) + 1);
  }

  /** One finished generation. */
  countCompletion(r: CompletionResult): void {
    this.promptTokens += r.promptTokens;
    this.completionTokens += r.completionTokens;
    this.cachedTokens += r.cachedTokens ?? 0;
    this.expertDrops += r.expertDrops ?? 0;
    const s = r.stats;
    if (!s) return;
    this.expertRequests += s.expertRequests;
    this.expertResidentHits += s.expertResidentHits;
    this.bytesRead.trunk += s.bytesRead.trunk;
    this.bytesRead.experts += s.bytesRead.experts;
    this.bytesRead.embed_head += s.bytesRead.embedHead;
    if (s.prefillTokensPerSecond > 0) this.lastPrefillTps = s.prefillTokensPerSecond;
    if (s.decodeTokensPerSecond > 0) this.lastDecodeTps = s.decodeTokensPerSecond;
  }

  /** The whole exposition; `queueDepth` = running + waiting requests now. */
  render(queueDepth: number, rssBytes: number): string {
    const out: string[] = [];
    const metric = (name: string, type: "counter" | "gauge", help: string, samples: [string, number][]) => {
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
      for (const [labels, v] of samples) out.push(`${name}${labels ? `{${labels}}` : ""} ${Number.isFinite(v) ? v : 0}`);
    };
    metric("k3_http_requests_total", "counter", "HTTP requests answered, by route and status.", [...this.requests].sort().map(([k, v]) => [k, v]));
    metric("k3_queue_depth", "gauge", "Generations running or waiting.", [["", queueDepth]]);
    metric("k3_prompt_tokens_total", "counter", "Prompt tokens of finished generations.", [["", this.promptTokens]]);
    metric("k3_prompt_cached_tokens_total", "counter", "Prompt tokens restored from the prompt cache.", [["", this.cachedTokens]]);
    metric("k3_completion_tokens_total", "counter", "Generated tokens.", [["", this.completionTokens]]);
    metric("k3_prefill_tokens_per_second", "gauge", "Prefill rate of the last generation that prefilled.", [["", this.lastPrefillTps]]);
    metric("k3_decode_tokens_per_second", "gauge", "Decode rate of the last generation that decoded.", [["", this.lastDecodeTps]]);
    metric("k3_bytes_read_total", "counter", "Bytes read from the checkpoint by source.", SOURCES.map((s) => [`source="${s}"`, this.bytesRead[s]]));
    metric("k3_expert_requests_total", "counter", "Routed-expert requests.", [["", this.expertRequests]]);
    metric("k3_expert_resident_hits_total", "counter", "Routed-expert requests served from memory.", [["", this.expertResidentHits]]);
    metric("k3_expert_hit_ratio", "gauge", "Resident hits / expert requests since start.", [["", this.expertRequests > 0 ? this.expertResidentHits / this.expertRequests : 0]]);
    metric("k3_expert_drops_total", "counter", "Routed experts left out because their bytes could not be read.", [["", this.expertDrops]]);
    metric("k3_process_resident_memory_bytes", "gauge", "Resident set size of the server process (the model's worker included).", [["", rssBytes]]);
    return out.join("\n") + "\n";
  }
}
