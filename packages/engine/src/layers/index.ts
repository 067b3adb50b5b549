/**
 * The model's layer pieces, each usable and checkable alone: the two mixers, the MLPs and the
 * attention-residual mix. The kernels under them are @k3/kda's, @k3/mla's, @k3/moe-stream's and
 * @k3/dense's (GluMlp, Linear).
 */
export { KdaMixer, kdaConfigOf, type KdaCore } from "./kda.js";
export { MlaMixer, mlaConfigOf, newMlaCache, loadMlaCache } from "./mla.js";
export { gluOf, loadGluMlp } from "./mlp.js";
export { MoeFfn } from "./moe.js";
export { attnResMix, fuseResWeights } from "./attnres.js";
