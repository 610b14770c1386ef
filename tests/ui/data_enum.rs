#[derive(Clone, Copy, mpx::MpiType)]
#[repr(u8)]
enum Message {
    Ping,
    Data { len: u32, checksum: u32 },
    Ack(u64),
}

fn main() {}
