//! Slice display on the GPU: float textures windowed and colour-mapped by `shaders/slice.wgsl`
//! through an `egui_wgpu` paint callback (egui's `custom3d_wgpu` pattern). The pipeline is made
//! once; each view keeps its textures and uploads only when a slice's content id changes, so
//! window/level, colormap and overlay changes cost one uniform write.

use std::collections::HashMap;
use std::sync::Arc;

use eframe::egui;
use eframe::egui_wgpu::{self, wgpu};

use super::slices::DisplaySlice;

pub const SHADER: &str = include_str!("../../shaders/slice.wgsl");

/// How one view is drawn (the shader's `View` uniform, minus the geometry).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Look {
    pub level: f32,
    pub width: f32,
    /// 0 gray, 1 viridis, 2 inferno.
    pub colormap: u32,
    pub difference: bool,
    pub label_opacity: f32,
    /// Opacity of the FEBDS mask overlay (0: none).
    pub mask_opacity: f32,
    /// Each voxel a flat square (nearest) instead of bilinear between voxel centres.
    pub nearest: bool,
    /// Whether the slice's three channels are drawn as RGB; otherwise channel `channel` is shown.
    pub colour: bool,
    pub channel: u32,
}

/// The colour of the FEBDS mask overlay (display values): magenta, apart from the label colours
/// and the crosshair.
pub const MASK_COLOUR: [f32; 3] = [1.0, 0.15, 0.85];

/// One view's paint callback: what to show and where the image lies in the view.
pub struct SliceCallback {
    pub key: u64,
    pub image: Arc<DisplaySlice>,
    pub other: Option<Arc<DisplaySlice>>,
    pub label: Option<Arc<DisplaySlice>>,
    /// The FEBDS mask (0/1) of the plane, same size as `image`.
    pub mask: Option<Arc<DisplaySlice>>,
    pub look: Look,
    /// Texel coordinates at the rectangle's top-left corner, and per unit of u and v.
    pub origin: [f32; 2],
    pub axis_u: [f32; 2],
    pub axis_v: [f32; 2],
    pub background: [f32; 4],
}

struct Tex {
    id: u64,
    size: (u32, u32),
    texture: wgpu::Texture,
    view: wgpu::TextureView,
}

struct ViewGpu {
    uniform: wgpu::Buffer,
    tex: [Option<Tex>; 4],
    bind_group: Option<wgpu::BindGroup>,
}

/// The renderer's resources, kept in egui_wgpu's `callback_resources`.
pub struct SliceRenderer {
    pipeline: wgpu::RenderPipeline,
    layout: wgpu::BindGroupLayout,
    srgb: bool,
    views: HashMap<u64, ViewGpu>,
    /// A 1×1 texture bound where a view has no second image or label.
    empty: Tex,
}

const UNIFORM_BYTES: u64 = 112;

impl SliceRenderer {
    /// Builds the pipeline and registers it with the renderer; call once at start-up.
    pub fn install(rs: &egui_wgpu::RenderState) {
        let device = &rs.device;
        let shader = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("augscope slice shader"),
            source: wgpu::ShaderSource::Wgsl(SHADER.into()),
        });
        let tex_entry = |binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::FRAGMENT,
            ty: wgpu::BindingType::Texture {
                sample_type: wgpu::TextureSampleType::Float { filterable: false },
                view_dimension: wgpu::TextureViewDimension::D2,
                multisampled: false,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("augscope slice layout"),
            entries: &[
                wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::FRAGMENT,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: wgpu::BufferSize::new(UNIFORM_BYTES),
                    },
                    count: None,
                },
                tex_entry(1),
                tex_entry(2),
                tex_entry(3),
                tex_entry(4),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("augscope slice pipeline layout"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("augscope slice pipeline"),
            layout: Some(&pipeline_layout),
            vertex: wgpu::VertexState {
                module: &shader,
                entry_point: Some("vs_main"),
                compilation_options: Default::default(),
                buffers: &[],
            },
            primitive: wgpu::PrimitiveState::default(),
            depth_stencil: None,
            multisample: wgpu::MultisampleState::default(),
            fragment: Some(wgpu::FragmentState {
                module: &shader,
                entry_point: Some("fs_main"),
                compilation_options: Default::default(),
                targets: &[Some(wgpu::ColorTargetState {
                    format: rs.target_format,
                    blend: None,
                    write_mask: wgpu::ColorWrites::ALL,
                })],
            }),
            multiview_mask: None,
            cache: None,
        });
        let empty = make_tex(device, 0, 1, 1);
        rs.renderer
            .write()
            .callback_resources
            .insert(SliceRenderer {
                pipeline,
                layout,
                srgb: rs.target_format.is_srgb(),
                views: HashMap::new(),
                empty,
            });
    }
}

fn make_tex(device: &wgpu::Device, id: u64, w: u32, h: u32) -> Tex {
    let texture = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("augscope slice"),
        size: wgpu::Extent3d {
            width: w.max(1),
            height: h.max(1),
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::R32Float,
        usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
        view_formats: &[],
    });
    let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
    Tex {
        id,
        size: (w, h),
        texture,
        view,
    }
}

fn upload(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    slot: &mut Option<Tex>,
    s: &DisplaySlice,
) -> bool {
    if slot.as_ref().is_some_and(|t| t.id == s.id) {
        return false;
    }
    let (w, h) = (s.width as u32, (s.height * s.channels) as u32);
    let recreate = slot.as_ref().is_none_or(|t| t.size != (w, h));
    if recreate {
        *slot = Some(make_tex(device, s.id, w, h));
    }
    let Some(t) = slot.as_mut() else {
        return recreate;
    };
    t.id = s.id;
    if w > 0 && h > 0 && s.data.len() == (w * h) as usize {
        let bytes: Vec<u8> = s.data.iter().flat_map(|v| v.to_ne_bytes()).collect();
        queue.write_texture(
            wgpu::TexelCopyTextureInfo {
                texture: &t.texture,
                mip_level: 0,
                origin: wgpu::Origin3d::ZERO,
                aspect: wgpu::TextureAspect::All,
            },
            &bytes,
            wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(4 * w),
                rows_per_image: Some(h),
            },
            wgpu::Extent3d {
                width: w,
                height: h,
                depth_or_array_layers: 1,
            },
        );
    }
    recreate
}

impl egui_wgpu::CallbackTrait for SliceCallback {
    fn prepare(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        _screen: &egui_wgpu::ScreenDescriptor,
        _encoder: &mut wgpu::CommandEncoder,
        resources: &mut egui_wgpu::CallbackResources,
    ) -> Vec<wgpu::CommandBuffer> {
        let Some(r) = resources.get_mut::<SliceRenderer>() else {
            return vec![];
        };
        let srgb = r.srgb;
        let view = r.views.entry(self.key).or_insert_with(|| ViewGpu {
            uniform: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("augscope view uniform"),
                size: UNIFORM_BYTES,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            tex: [None, None, None, None],
            bind_group: None,
        });
        let mut rebind = view.bind_group.is_none();
        rebind |= upload(device, queue, &mut view.tex[0], &self.image);
        let had = [
            view.tex[1].is_some(),
            view.tex[2].is_some(),
            view.tex[3].is_some(),
        ];
        match &self.other {
            Some(o) => rebind |= upload(device, queue, &mut view.tex[1], o),
            None => view.tex[1] = None,
        }
        match &self.label {
            Some(l) => rebind |= upload(device, queue, &mut view.tex[2], l),
            None => view.tex[2] = None,
        }
        match &self.mask {
            Some(m) => rebind |= upload(device, queue, &mut view.tex[3], m),
            None => view.tex[3] = None,
        }
        rebind |= had
            != [
                view.tex[1].is_some(),
                view.tex[2].is_some(),
                view.tex[3].is_some(),
            ];
        if rebind {
            fn tv<'a>(t: &'a Option<Tex>, empty: &'a wgpu::TextureView) -> &'a wgpu::TextureView {
                t.as_ref().map_or(empty, |t| &t.view)
            }
            let empty = &r.empty.view;
            view.bind_group = Some(device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("augscope view"),
                layout: &r.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: view.uniform.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: wgpu::BindingResource::TextureView(tv(&view.tex[0], empty)),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: wgpu::BindingResource::TextureView(tv(&view.tex[1], empty)),
                    },
                    wgpu::BindGroupEntry {
                        binding: 3,
                        resource: wgpu::BindingResource::TextureView(tv(&view.tex[2], empty)),
                    },
                    wgpu::BindGroupEntry {
                        binding: 4,
                        resource: wgpu::BindingResource::TextureView(tv(&view.tex[3], empty)),
                    },
                ],
            }));
        }
        let l = &self.look;
        let f = |v: f32| v.to_ne_bytes();
        let u = |v: u32| v.to_ne_bytes();
        let has_label = self.label.is_some() && l.label_opacity > 0.0;
        let difference = l.difference && self.other.is_some();
        let has_mask = self
            .mask
            .as_ref()
            .is_some_and(|m| m.width == self.image.width && m.height == self.image.height)
            && l.mask_opacity > 0.0;
        let fields: [[u8; 4]; 28] = [
            f(self.origin[0]),
            f(self.origin[1]),
            f(self.axis_u[0]),
            f(self.axis_u[1]),
            f(self.axis_v[0]),
            f(self.axis_v[1]),
            f(self.image.width as f32),
            f(self.image.height as f32),
            f(l.level),
            f(l.width),
            u(l.colormap),
            u(difference as u32),
            u(if l.colour && self.image.channels == 3 {
                3
            } else {
                1
            }),
            u(has_label as u32),
            f(l.label_opacity),
            u(srgb as u32),
            f(self.background[0]),
            f(self.background[1]),
            f(self.background[2]),
            f(self.background[3]),
            f(MASK_COLOUR[0]),
            f(MASK_COLOUR[1]),
            f(MASK_COLOUR[2]),
            f(1.0),
            u(has_mask as u32),
            f(l.mask_opacity),
            u(l.nearest as u32),
            u(l.channel.min(self.image.channels.saturating_sub(1) as u32)),
        ];
        queue.write_buffer(&view.uniform, 0, fields.as_flattened());
        vec![]
    }

    fn paint(
        &self,
        _info: egui::PaintCallbackInfo,
        pass: &mut wgpu::RenderPass<'static>,
        resources: &egui_wgpu::CallbackResources,
    ) {
        let Some(r) = resources.get::<SliceRenderer>() else {
            return;
        };
        let Some(bg) = r.views.get(&self.key).and_then(|v| v.bind_group.as_ref()) else {
            return;
        };
        pass.set_pipeline(&r.pipeline);
        pass.set_bind_group(0, bg, &[]);
        pass.draw(0..6, 0..1);
    }
}
