//! Builds the small C shim over libjpeg-turbo's libjpeg API (`csrc/jpeg_region.c`) and links
//! the system's libjpeg-turbo, which brings its own SIMD decoder. `scripts/system-deps.sh`
//! installs it (Debian: `libjpeg62-turbo-dev`); `make` runs that script. Only with the `jpeg`
//! feature (the default).

fn main() {
    println!("cargo:rerun-if-changed=csrc/jpeg_region.c");
    // Without the `jpeg` feature (the wheel's `hetgen` command) there is nothing to link.
    if std::env::var_os("CARGO_FEATURE_JPEG").is_none() {
        return;
    }
    let mut build = cc::Build::new();
    build.file("csrc/jpeg_region.c").warnings(true);
    // pkg-config knows non-default prefixes; without it, libjpeg is on the default paths.
    match pkg_config::Config::new().probe("libjpeg") {
        Ok(library) => {
            build.includes(&library.include_paths);
        }
        Err(_) => println!("cargo:rustc-link-lib=jpeg"),
    }
    if let Err(e) = build.try_compile("hetgen_jpeg") {
        panic!(
            "could not compile csrc/jpeg_region.c against libjpeg-turbo ({e}).\n\
             hint: install libjpeg-turbo's headers and library: `scripts/system-deps.sh` \
             (Debian/Ubuntu: apt-get install libjpeg62-turbo-dev or libjpeg-turbo8-dev)"
        );
    }
}
