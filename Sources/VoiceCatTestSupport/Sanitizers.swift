// Whether the process runs under a sanitizer, for tests that judge real-time audio.
import Glibc

public enum Sanitizers {
    /// True under ThreadSanitizer (`swift test --sanitize=thread`), whose runtime
    /// exports `__tsan_init`. Every access is instrumented there, so the audio threads
    /// run several times slower and miss real-time deadlines that the normal build
    /// meets: tests still run their code paths under it (what TSan is for) but leave
    /// what a listener hears on a clean path to the normal build.
    public static let thread: Bool = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_init") != nil
}
