/** Every error @k3/mla throws on bad input: `code` says which kind, the message names the thing. */
export class MlaError extends Error {
  constructor(
    readonly code: "config" | "weight" | "input" | "cache",
    message: string,
  ) {
    super(`@k3/mla: ${message}`);
    this.name = "MlaError";
  }
}
