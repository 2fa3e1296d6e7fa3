//! What the window needs from the system, checked before it opens: the windowing libraries that
//! winit loads at run time (a missing one would otherwise panic deep inside it) and a display.
//! Each failure is one line that names the package to install.

/// A library winit or wgpu loads at run time, and the packages that provide it.
struct Lib {
    soname: &'static str,
    debian: &'static str,
    fedora: &'static str,
}

const fn lib(soname: &'static str, debian: &'static str, fedora: &'static str) -> Lib {
    Lib {
        soname,
        debian,
        fedora,
    }
}

/// X11: what winit's x11-dl and xkbcommon-dl open when the window is made.
const X11: [Lib; 7] = [
    lib("libX11.so.6", "libx11-6", "libX11"),
    lib("libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb"),
    lib("libXcursor.so.1", "libxcursor1", "libXcursor"),
    lib("libXrandr.so.2", "libxrandr2", "libXrandr"),
    lib("libXi.so.6", "libxi6", "libXi"),
    lib("libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon"),
    lib(
        "libxkbcommon-x11.so.0",
        "libxkbcommon-x11-0",
        "libxkbcommon-x11",
    ),
];

/// Wayland: the client library and the keymap library.
const WAYLAND: [Lib; 2] = [
    lib(
        "libwayland-client.so.0",
        "libwayland-client0",
        "libwayland-client",
    ),
    lib("libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon"),
];

/// The renderer: wgpu draws through Vulkan or, without it, OpenGL ES over EGL.
const VULKAN: Lib = lib(
    "libvulkan.so.1",
    "libvulkan1 mesa-vulkan-drivers",
    "vulkan-loader mesa-vulkan-drivers",
);
const EGL: Lib = lib("libEGL.so.1", "libegl1 libgl1-mesa-dri", "mesa-libEGL");

/// Whether the dynamic loader finds and loads `soname`, exactly as winit and wgpu will.
#[allow(unsafe_code)] // dlopen is FFI; loading the library is the only way to know it loads
fn loads(soname: &str) -> bool {
    // SAFETY: these are the system's windowing and graphics libraries, the ones the window opens
    // moments later anyway; their initialisers are what winit and wgpu run on load.
    unsafe { libloading::Library::new(soname) }.is_ok()
}

fn missing(l: &Lib) -> String {
    format!(
        "the window needs {} and it cannot be loaded: install {} (Debian/Ubuntu) or {} (Fedora)",
        l.soname, l.debian, l.fedora
    )
}

/// Checks the display and the libraries of the window system in use; the error is one line.
pub fn check() -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Ok(());
    }
    let wayland = std::env::var_os("WAYLAND_DISPLAY").is_some_and(|d| !d.is_empty());
    let x11 = std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty());
    if !wayland && !x11 {
        return Err(
            "no display to open the window on (neither DISPLAY nor WAYLAND_DISPLAY is set); \
             on a server run it under Xvfb (xvfb-run augscope) or use the command-line tools \
             (augscope --help)"
                .into(),
        );
    }
    let libs: &[Lib] = if wayland { &WAYLAND } else { &X11 };
    if let Some(l) = libs.iter().find(|l| !loads(l.soname)) {
        return Err(missing(l));
    }
    // libxkbcommon needs the keyboard descriptions (winit panics without them).
    let xkb = std::env::var_os("XKB_CONFIG_ROOT").map_or_else(
        || std::path::PathBuf::from("/usr/share/X11/xkb"),
        Into::into,
    );
    if !xkb.join("rules").is_dir() {
        return Err(format!(
            "the window needs the keyboard descriptions in {} and they are missing: install \
             xkb-data (Debian/Ubuntu) or xkeyboard-config (Fedora), or set XKB_CONFIG_ROOT",
            xkb.display()
        ));
    }
    if !loads(VULKAN.soname) && !loads(EGL.soname) {
        return Err(format!(
            "the window needs Vulkan ({}) or OpenGL ES (libEGL.so.1) and neither can be loaded: \
             install {} or {} (Debian/Ubuntu), {} or {} (Fedora)",
            VULKAN.soname, VULKAN.debian, EGL.debian, VULKAN.fedora, EGL.fedora
        ));
    }
    Ok(())
}

/// eframe's error at start-up, as one line with what to do about it.
pub fn explain(e: &str) -> String {
    let one = e.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.contains("surface") || one.contains("adapter") || one.contains("backend") {
        format!(
            "no GPU renderer for the window ({one}): install a Vulkan driver \
             (mesa-vulkan-drivers on Debian/Ubuntu and Fedora) or OpenGL ES (libegl1 \
             libgl1-mesa-dri; mesa-libEGL on Fedora)"
        )
    } else {
        one
    }
}
