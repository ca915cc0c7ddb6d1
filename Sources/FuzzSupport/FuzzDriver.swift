import Foundation

/// The entry point both fuzz targets share: under libFuzzer (built with `-DFUZZING`) it
/// hands every generated input to `check`; without it, it replays the files named on the
/// command line (to reproduce a finding). `check` traps on a finding.
public enum FuzzDriver {
    /// libFuzzer's callback is a C function and cannot capture: it reads the check here.
    nonisolated(unsafe) private static var check: ([UInt8]) -> Void = { _ in }

    public static func run(_ check: @escaping ([UInt8]) -> Void) {
        Self.check = check
        #if FUZZING
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        _ = runDriver(&argc, &argv) { data, size in
            FuzzDriver.check(size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
            return 0
        }
        #else
        for path in CommandLine.arguments.dropFirst() {
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            check(Array(data))
            print("ok \(path)")
        }
        #endif
    }
}

#if FUZZING
@_silgen_name("LLVMFuzzerRunDriver")
private func runDriver(_ argc: UnsafeMutablePointer<Int32>,
                       _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                       _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32
#endif
