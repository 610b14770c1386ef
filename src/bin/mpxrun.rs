//! `mpxrun -n N [--no-prefix] [--keep-going] [--stdin RANK|none]
//! [--kill-after SECONDS] [--hosts h1,h2,... [--launch COMMAND]
//! [--pmi-host IP]] program [args...]`: runs N processes of `program`, on
//! this host or on the hosts given, as one mpx job (see
//! `mpx_net::bootstrap::mpxrun`).

fn main() {
    mpx_net::bootstrap::mpxrun::main()
}
