/**
 * Who may talk to `k3 serve`. The server is on loopback, but every web page the user opens can
 * send it requests, so three checks run before a route is looked at:
 *
 * - Host: only the bound address, localhost, 127.0.0.1 or [::1] at the bound port, or a name given
 *   with --allow-host. A foreign Host is what a DNS-rebinding page sends (its own name, resolved to
 *   127.0.0.1); refusing it keeps such a page from reading replies.
 * - Origin: a browser sends it on every cross-origin request and on same-origin POSTs. Only the
 *   server's own origin (http://<the Host it asked for>) and the --cors origins pass; "null"
 *   (sandboxed frames, file: pages) passes only when listed.
 * - Content-Type: a POST must be application/json. text/plain, form and multipart bodies are the
 *   "simple" requests a page can send cross-origin without a preflight.
 */

/** What the guard answers: null = go on, else the refusal (status, message, param). */
export interface GuardRefusal {
  status: 403 | 415;
  message: string;
  param: string;
}

export interface GuardOptions {
  /** The address the server is bound to (e.g. 127.0.0.1, ::1, 0.0.0.0) and the name it was given. */
  boundHosts: readonly string[];
  boundPort: number;
  /** Extra Host names (NAME or NAME:PORT) from --allow-host. NAME alone matches any port. */
  allowHosts?: readonly string[];
  /** Origins allowed cross-origin (--cors), exactly as a browser sends them, or "*" for any. */
  corsOrigins?: readonly string[];
}

/** Splits a Host header into lower-cased name and port ("" when absent); null when malformed. */
export function splitHost(host: string): { name: string; port: string } | null {
  const h = host.trim().toLowerCase();
  const m = /^(\[[0-9a-f:.]+\]|[a-z0-9._-]+)(?::(\d{1,5}))?$/.exec(h);
  if (!m) return null;
  return { name: m[1], port: m[2] ?? "" };
}

/** The bound address as it appears in a Host header (IPv6 in brackets). */
function hostName(addr: string): string {
  const a = addr.toLowerCase();
  return a.includes(":") && !a.startsWith("[") ? `[${a}]` : a;
}

export class HttpGuard {
  private readonly local: Set<string>;
  private readonly extraAnyPort = new Set<string>();
  private readonly extraExact = new Set<string>();
  private readonly cors: Set<string>;
  private readonly corsAny: boolean;
  private readonly port: string;

  constructor(o: GuardOptions) {
    this.port = String(o.boundPort);
    this.local = new Set(["localhost", "127.0.0.1", "[::1]", ...o.boundHosts.map(hostName)]);
    for (const entry of o.allowHosts ?? []) {
      const s = splitHost(entry);
      if (!s) throw new Error(`--allow-host ${JSON.stringify(entry)}: expected NAME or NAME:PORT`);
      if (s.port) this.extraExact.add(`${s.name}:${s.port}`);
      else this.extraAnyPort.add(s.name);
    }
    this.corsAny = (o.corsOrigins ?? []).includes("*");
    this.cors = new Set((o.corsOrigins ?? []).map((x) => x.toLowerCase().replace(/\/$/, "")));
  }

  /** Is this Host header one the server answers to? */
  hostAllowed(host: string | undefined): boolean {
    if (!host) return false;
    const s = splitHost(host);
    if (!s) return false;
    if (this.extraAnyPort.has(s.name) || this.extraExact.has(`${s.name}:${s.port}`)) return true;
    // No port in the Host header means port 80: a built-in name must carry the bound port.
    return this.local.has(s.name) && (s.port || "80") === this.port;
  }

  /** Is this Origin let through cross-origin (the CORS headers are then sent)? */
  corsAllowed(origin: string): boolean {
    return this.corsAny || this.cors.has(origin.toLowerCase());
  }

  get corsEnabled(): boolean {
    return this.corsAny || this.cors.size > 0;
  }

  /** Host and Origin checks for any request. */
  check(headers: { host?: string; origin?: string }): GuardRefusal | null {
    if (!this.hostAllowed(headers.host)) {
      return {
        status: 403,
        message: `Host ${JSON.stringify(headers.host ?? "")} is not this server (it answers to localhost, 127.0.0.1, [::1] or its bound address at port ${this.port}; k3 serve --allow-host NAME adds one)`,
        param: "host",
      };
    }
    const origin = headers.origin;
    if (origin === undefined) return null;
    if (origin.toLowerCase() === `http://${headers.host!.trim().toLowerCase()}`) return null;
    if (this.corsAllowed(origin)) return null;
    return {
      status: 403,
      message: `Origin ${JSON.stringify(origin)} is not allowed (only same-origin pages may call this server; k3 serve --cors ORIGIN allows one)`,
      param: "origin",
    };
  }

  /** Content-Type check for a POST body. */
  checkContentType(contentType: string | undefined): GuardRefusal | null {
    const media = (contentType ?? "").split(";")[0].trim().toLowerCase();
    if (media === "application/json") return null;
    return {
      status: 415,
      message: `Content-Type ${JSON.stringify(contentType ?? "")}: expected application/json`,
      param: "content-type",
    };
  }
}
