// Prints the README's plan table: every preset planned for the published K3 dimensions on a
// machine with 500 GB available. `node --import tsx scripts/plan-table.ts`
import { censusOf } from "../src/census.js";
import { parseConfig } from "../src/config.js";
import { budgetsFor, GB, planMemory, PRESET_NAMES } from "../src/presets.js";
import { publishedK3Config } from "../test/helpers.js";
import { formatBytes } from "@k3/native";

const k3 = censusOf(parseConfig(publishedK3Config()));
const box = { totalBytes: 512 * GB, availableBytes: 500 * GB };
console.log("| preset | pinned layers | ring | cache slots/layer | KV tokens | planned total | cold read/token |");
console.log("|---|---:|---|---:|---:|---:|---:|");
for (const preset of PRESET_NAMES.filter((p) => p !== "auto")) {
  // With a packed trunk (k3 pack, --trunk DIR): without one the whole trunk is resident at every preset.
  const plan = planMemory(k3, budgetsFor(preset, k3, box), preset, box, { packedTrunk: true });
  const ring = plan.ringSlots === 0 ? "none" : `${plan.ringSlots} x ${formatBytes(plan.ringSlotBytes)}`;
  console.log(
    `| ${preset} | ${plan.pinnedLayers.length}/${k3.layerTrunkBytes.length} | ${ring} | ${plan.cacheSlotsPerLayer} | ${plan.kvCapacityTokens} | ${formatBytes(plan.totalBytes)} | ${formatBytes(plan.expectedBytesPerToken)} |`,
  );
}
