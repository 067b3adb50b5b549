/**
 * The one byte formatter of the k3 packages: decimal (SI) units, as every figure the project
 * reports (GB = 1e9 bytes, GB/s). 999 -> "999 B", 1536 -> "1.5 kB", 17547264 -> "17.55 MB",
 * 1.56e12 -> "1.56 TB".
 */
export function formatBytes(n: number): string {
  const a = Math.abs(n);
  if (a >= 1e12) return `${(n / 1e12).toFixed(2)} TB`;
  if (a >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  if (a >= 1e6) return `${(n / 1e6).toFixed(2)} MB`;
  if (a >= 1e3) return `${(n / 1e3).toFixed(1)} kB`;
  return `${Math.round(n)} B`;
}
