trait Shape {
    fn area(&self) -> f64;
}

#[derive(mpx::MpiType)]
#[repr(C)]
struct Scene {
    id: u32,
    shape: Box<dyn Shape + Send + Sync>,
}

fn main() {}
