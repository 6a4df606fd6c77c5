// Host state for the SDK in the `transform` world (`sluice plugin build`
// stages this file as `sluice-state.js` next to `sluice.js`).
export { get, put, delete } from "sluice:plugin/state@0.1.0";
