// The `aggregate` world has no host state: the host stores the accumulator.
// `sluice plugin build` stages this file as `sluice-state.js` for
// aggregates, so `state.*` fails with a clear message instead of the
// component failing to build.
function unavailable() {
  throw new Error("host state is not available to aggregates: keep what you need in the accumulator");
}

export { unavailable as get, unavailable as put, unavailable as delete };
