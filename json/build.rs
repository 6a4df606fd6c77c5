//! Builds the C++ half of [`scan`](src/scan.rs) against Debian's simdjson
//! (`libsimdjson-dev`, installed by `scripts/setup-toolchain.sh`).

fn main() {
    build_json_scan();
}

/// Compiles `src/simdjson_scan.cpp`. simdjson's On-Demand parser
/// is inlined from its header, so its SIMD kernel is the one the compiler
/// may use: on x86-64 the file is compiled for AVX2 (simdjson's "haswell"
/// kernel), and `scan` calls it only on a CPU that has those features
/// (anywhere else the host parses with serde_json alone).
fn build_json_scan() {
    let source = "src/simdjson_scan.cpp";
    println!("cargo:rerun-if-changed={source}");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file(source)
        .std("c++17")
        .opt_level(3)
        .define("NDEBUG", None)
        .warnings(true);
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        for feature in [
            "-mavx2", "-mbmi", "-mbmi2", "-mpclmul", "-mlzcnt", "-mpopcnt",
        ] {
            build.flag(feature);
        }
    }
    build.compile("sluice_json_scan");
    println!("cargo:rustc-link-lib=dylib=simdjson");
}
