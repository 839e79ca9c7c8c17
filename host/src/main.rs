fn main() -> std::process::ExitCode {
    windtunnel::cli::main()
}
