// Slice display for augscope: window/level, gray or a perceptual colormap, label overlay and
// difference maps, evaluated per fragment from float textures (R32Float), so moving W/L never
// touches the data. The quad covers the view's rectangle; `uv_to_texel` maps it to texels.

struct View {
    // texel = origin + uv.x * axis_u + uv.y * axis_v (uv in [0, 1] over the view rectangle)
    origin: vec2<f32>,
    axis_u: vec2<f32>,
    axis_v: vec2<f32>,
    // width, height of one channel plane in texels
    size: vec2<f32>,
    // window centre and width (difference mode: 0 and the |Δ| that maps to full colour)
    level: f32,
    width: f32,
    // 0 gray, 1 viridis, 2 inferno
    colormap: u32,
    // 0 image, 1 |image - other|
    mode: u32,
    // 3: the texture's three channel planes (stacked vertically) are RGB; 1: one plane is shown
    channels: u32,
    has_label: u32,
    label_opacity: f32,
    // 1 when the render target is *Srgb and expects linear values
    srgb_target: u32,
    background: vec4<f32>,
    // FEBDS mask overlay: colour, and whether and how opaque it is drawn
    mask_colour: vec4<f32>,
    has_mask: u32,
    mask_opacity: f32,
    // 1: each voxel a flat square (nearest), 0: bilinear between voxel centres
    nearest: u32,
    // the channel plane shown when `channels` is 1 (a 4D scan's volume)
    channel: u32,
};

@group(0) @binding(0) var<uniform> view: View;
@group(0) @binding(1) var image_tex: texture_2d<f32>;
@group(0) @binding(2) var other_tex: texture_2d<f32>;
@group(0) @binding(3) var label_tex: texture_2d<f32>;
@group(0) @binding(4) var mask_tex: texture_2d<f32>;

struct VsOut {
    @builtin(position) position: vec4<f32>,
    @location(0) uv: vec2<f32>,
};

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {
    // Two triangles covering the viewport: (0,0) (1,0) (0,1) / (0,1) (1,0) (1,1).
    var corners = array<vec2<f32>, 6>(
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 0.0), vec2<f32>(0.0, 1.0),
        vec2<f32>(0.0, 1.0), vec2<f32>(1.0, 0.0), vec2<f32>(1.0, 1.0),
    );
    let uv = corners[i];
    var out: VsOut;
    out.position = vec4<f32>(uv.x * 2.0 - 1.0, 1.0 - uv.y * 2.0, 0.0, 1.0);
    out.uv = uv;
    return out;
}

// Polynomial fits of matplotlib's viridis and inferno (Matt Zucker, shadertoy WlfXRN, CC0).
fn viridis(t: f32) -> vec3<f32> {
    let c0 = vec3<f32>(0.2777273272234177, 0.005407344544966578, 0.3340998053353061);
    let c1 = vec3<f32>(0.1050930431085774, 1.404613529898575, 1.384590162594685);
    let c2 = vec3<f32>(-0.3308618287255563, 0.214847559468213, 0.09509516302823659);
    let c3 = vec3<f32>(-4.634230498983486, -5.799100973351585, -19.33244095627987);
    let c4 = vec3<f32>(6.228269936347081, 14.17993336680509, 56.69055260068105);
    let c5 = vec3<f32>(4.776384997670288, -13.74514537774601, -65.35303263337234);
    let c6 = vec3<f32>(-5.435455855934631, 4.645852612178535, 26.3124352495832);
    return c0 + t * (c1 + t * (c2 + t * (c3 + t * (c4 + t * (c5 + t * c6)))));
}

fn inferno(t: f32) -> vec3<f32> {
    let c0 = vec3<f32>(0.0002189403691192265, 0.001651004631001012, -0.01948089843709184);
    let c1 = vec3<f32>(0.1065134194856116, 0.5639564367884091, 3.932712388889277);
    let c2 = vec3<f32>(11.60249308247187, -3.972853965665698, -15.9423941062914);
    let c3 = vec3<f32>(-41.70399613139459, 17.43639888205313, 44.35414519872813);
    let c4 = vec3<f32>(77.162935699427, -33.40235894210092, -81.80730925738993);
    let c5 = vec3<f32>(-71.31942824499214, 32.62606426397723, 73.20951985803202);
    let c6 = vec3<f32>(25.13112622477341, -12.24266895238567, -23.07032500287172);
    return c0 + t * (c1 + t * (c2 + t * (c3 + t * (c4 + t * (c5 + t * c6)))));
}

fn colormap(t: f32) -> vec3<f32> {
    let x = clamp(t, 0.0, 1.0);
    switch view.colormap {
        case 1u: { return clamp(viridis(x), vec3<f32>(0.0), vec3<f32>(1.0)); }
        case 2u: { return clamp(inferno(x), vec3<f32>(0.0), vec3<f32>(1.0)); }
        default: { return vec3<f32>(x); }
    }
}

// Bilinear interpolation by hand: R32Float is not filterable on every adapter. With `nearest`,
// the voxel that holds p, as it is.
fn fetch(tex: texture_2d<f32>, p: vec2<f32>, channel: u32) -> f32 {
    let row = i32(channel) * i32(view.size.y);
    if (view.nearest == 1u) {
        let t = clamp(vec2<i32>(floor(p)), vec2<i32>(0), vec2<i32>(view.size) - vec2<i32>(1));
        return textureLoad(tex, vec2<i32>(t.x, t.y + row), 0).r;
    }
    let q = p - vec2<f32>(0.5);
    let i0 = vec2<i32>(floor(q));
    let f = q - floor(q);
    let hi = vec2<i32>(view.size) - vec2<i32>(1);
    let a = clamp(i0, vec2<i32>(0), hi);
    let b = clamp(i0 + vec2<i32>(1), vec2<i32>(0), hi);
    let v00 = textureLoad(tex, vec2<i32>(a.x, a.y + row), 0).r;
    let v10 = textureLoad(tex, vec2<i32>(b.x, a.y + row), 0).r;
    let v01 = textureLoad(tex, vec2<i32>(a.x, b.y + row), 0).r;
    let v11 = textureLoad(tex, vec2<i32>(b.x, b.y + row), 0).r;
    return mix(mix(v00, v10, f.x), mix(v01, v11, f.x), f.y);
}

// Distinct colours for label values 1, 2, … (grey matter, white matter, then a golden-ratio walk).
fn label_colour(id: u32) -> vec3<f32> {
    switch id {
        case 1u: { return vec3<f32>(0.95, 0.35, 0.20); }
        case 2u: { return vec3<f32>(0.20, 0.65, 0.95); }
        case 3u: { return vec3<f32>(0.35, 0.85, 0.30); }
        default: {
            let h = fract(f32(id) * 0.618034);
            let k = vec3<f32>(0.0, 2.0 / 3.0, 1.0 / 3.0);
            return clamp(abs(fract(vec3<f32>(h) + k) * 6.0 - 3.0) - 1.0, vec3<f32>(0.0), vec3<f32>(1.0));
        }
    }
}

// Colours here are display (gamma) values, as egui's; an sRGB target re-encodes them.
fn finish(rgb: vec3<f32>) -> vec4<f32> {
    if (view.srgb_target == 1u) {
        return vec4<f32>(pow(rgb, vec3<f32>(2.2)), 1.0);
    }
    return vec4<f32>(rgb, 1.0);
}

@fragment
fn fs_main(in: VsOut) -> @location(0) vec4<f32> {
    let p = view.origin + in.uv.x * view.axis_u + in.uv.y * view.axis_v;
    if (p.x < 0.0 || p.y < 0.0 || p.x > view.size.x || p.y > view.size.y) {
        return finish(view.background.rgb);
    }
    var rgb: vec3<f32>;
    let lo = view.level - 0.5 * view.width;
    let inv_w = 1.0 / max(view.width, 1e-20);
    if (view.mode == 1u) {
        var d = 0.0;
        if (view.channels == 3u) {
            for (var c = 0u; c < 3u; c = c + 1u) {
                d = max(d, abs(fetch(image_tex, p, c) - fetch(other_tex, p, c)));
            }
        } else {
            d = abs(fetch(image_tex, p, view.channel) - fetch(other_tex, p, view.channel));
        }
        rgb = inferno(clamp(d * inv_w, 0.0, 1.0));
    } else if (view.channels == 3u) {
        rgb = vec3<f32>(
            clamp((fetch(image_tex, p, 0u) - lo) * inv_w, 0.0, 1.0),
            clamp((fetch(image_tex, p, 1u) - lo) * inv_w, 0.0, 1.0),
            clamp((fetch(image_tex, p, 2u) - lo) * inv_w, 0.0, 1.0),
        );
    } else {
        rgb = colormap((fetch(image_tex, p, view.channel) - lo) * inv_w);
    }
    if (view.has_label == 1u && view.label_opacity > 0.0) {
        // Labels are categorical: the label of the voxel that holds p, never a mixed value.
        let hi = vec2<i32>(view.size) - vec2<i32>(1);
        let t = clamp(vec2<i32>(floor(p)), vec2<i32>(0), hi);
        let id = textureLoad(label_tex, t, 0).r;
        if (id >= 0.5) {
            // Drawn as the image is: flat squares with `nearest`, else with edges as smooth as
            // the bilinear image (the share of the four nearest voxel centres holding this label).
            var cover = 1.0;
            if (view.nearest == 0u) {
                let q = p - vec2<f32>(0.5);
                let f = q - floor(q);
                let a = clamp(vec2<i32>(floor(q)), vec2<i32>(0), hi);
                let b = clamp(vec2<i32>(floor(q)) + vec2<i32>(1), vec2<i32>(0), hi);
                let s00 = select(0.0, 1.0, abs(textureLoad(label_tex, vec2<i32>(a.x, a.y), 0).r - id) < 0.5);
                let s10 = select(0.0, 1.0, abs(textureLoad(label_tex, vec2<i32>(b.x, a.y), 0).r - id) < 0.5);
                let s01 = select(0.0, 1.0, abs(textureLoad(label_tex, vec2<i32>(a.x, b.y), 0).r - id) < 0.5);
                let s11 = select(0.0, 1.0, abs(textureLoad(label_tex, vec2<i32>(b.x, b.y), 0).r - id) < 0.5);
                let share = mix(mix(s00, s10, f.x), mix(s01, s11, f.x), f.y);
                cover = smoothstep(0.25, 0.75, share);
            }
            rgb = mix(rgb, label_colour(u32(id + 0.5)), view.label_opacity * cover);
        }
    }
    if (view.has_mask == 1u && view.mask_opacity > 0.0) {
        // A 0/1 mask: nearest texel, as the labels.
        let hi = vec2<i32>(view.size) - vec2<i32>(1);
        let t = clamp(vec2<i32>(floor(p)), vec2<i32>(0), hi);
        if (textureLoad(mask_tex, t, 0).r >= 0.5) {
            rgb = mix(rgb, view.mask_colour.rgb, view.mask_opacity);
        }
    }
    return finish(rgb);
}
