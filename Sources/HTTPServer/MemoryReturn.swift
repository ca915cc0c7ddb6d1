import CLinux
import Foundation
import Synchronization

/// Gives memory back after large requests. glibc keeps freed blocks of big bodies in its
/// arenas (one per thread that allocated, up to 8 per core), so eight concurrent 8 MiB
/// uploads leave hundreds of MB resident long after they are done. The arenas are capped
/// at start, and after a request that moved a large body the heap is trimmed on a
/// background thread (never on an event loop: trimming a large heap takes milliseconds).
public enum MemoryReturn {
    /// A request or response body at least this large marks the heap for trimming.
    static let largeBody = 1 << 20
    /// When the last large body was noted (monotonic ns; 0: none since the last trim).
    private static let lastLargeBody = Atomic<UInt64>(0)
    private static let running = Atomic<Bool>(false)
    /// The trim waits this long after the last large body: its buffers (a response still
    /// being written, a request still referenced) are freed a moment after it is noted.
    private static let settle: UInt64 = 1_000_000_000

    /// glibc's heap: bytes in use by the program, and bytes free but still held (arenas and
    /// mapped chunks), for `/metrics`.
    public static func heap() -> (inUse: Int, free: Int) {
        let info = mallinfo2()
        return (Int(info.uordblks) + Int(info.hblkhd), Int(info.fordblks))
    }

    /// Caps glibc's arenas at two per core (its default is eight), and maps every block of
    /// 1 MiB or more on its own. glibc's default threshold rises with each large block freed
    /// (up to 32 MiB), after which big bodies come from the arenas and stay resident there;
    /// a fixed threshold returns them to the kernel the moment they are freed.
    static func boundArenas() {
        _ = mallopt(M_ARENA_MAX, Int32(max(2, 2 * ProcessInfo.processInfo.activeProcessorCount)))
        _ = mallopt(M_MMAP_THRESHOLD, Int32(largeBody))
    }

    /// Called on an event loop after a request with a large body: cheap, just a flag.
    static func noteLargeBody() { lastLargeBody.store(monotonicNanoseconds(), ordering: .relaxed) }

    /// Called from each loop's sweep: starts one trim once large work has settled, unless
    /// one is running.
    static func trimIfDue(now: UInt64) {
        let last = lastLargeBody.load(ordering: .relaxed)
        guard last != 0, now >= last + settle,
              running.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        // A body noted meanwhile keeps its own later timestamp and trims again.
        _ = lastLargeBody.compareExchange(expected: last, desired: 0, ordering: .relaxed)
        DispatchQueue.global(qos: .utility).async {
            _ = malloc_trim(0)
            running.store(false, ordering: .releasing)
        }
    }
}
