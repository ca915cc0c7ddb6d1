import Foundation

/// Finds files shipped beside the binary: `migrations/`, `openapi.yaml` and `ui/`.
///
/// Looked for in `<binary>/../share/teamcache/` (the installed and container layout), then
/// in the source tree this binary was built from (development and tests), and only then in
/// the working folder. The files shipped with the binary come first: a command run from a
/// folder that happens to hold some other `migrations/` must not apply those.
public enum ResourceLocator {
    public static func find(_ name: String) -> URL? {
        let manager = FileManager.default
        let binary = URL(fileURLWithPath: CommandLine.arguments.first ?? ".").resolvingSymlinksInPath()
        let candidates = [
            binary.deletingLastPathComponent().appendingPathComponent("../share/teamcache/\(name)"),
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../\(name)"),
            URL(fileURLWithPath: manager.currentDirectoryPath).appendingPathComponent(name),
        ]
        return candidates.first { manager.fileExists(atPath: $0.path) }?.standardizedFileURL
    }
}
