/** Every error @k3/kda throws on bad input: `code` says which kind, the message names the thing. */
export class KdaError extends Error {
  constructor(
    readonly code: "config" | "weight" | "input" | "state",
    message: string,
  ) {
    super(`@k3/kda: ${message}`);
    this.name = "KdaError";
  }
}
