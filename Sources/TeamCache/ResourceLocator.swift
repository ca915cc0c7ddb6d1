import Foundation

/// Finds files shipped beside the binary: `migrations/` and `openapi.yaml`.
///
/// Looked for in the working folder, then `<binary>/../share/teamcache/` (the container
/// layout), then the source tree this binary was built from (development and tests).
public enum ResourceLocator {
    public static func find(_ name: String) -> URL? {
        let manager = FileManager.default
        let binary = URL(fileURLWithPath: CommandLine.arguments.first ?? ".").resolvingSymlinksInPath()
        let candidates = [
            URL(fileURLWithPath: manager.currentDirectoryPath).appendingPathComponent(name),
            binary.deletingLastPathComponent().appendingPathComponent("../share/teamcache/\(name)"),
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../\(name)"),
        ]
        return candidates.first { manager.fileExists(atPath: $0.path) }?.standardizedFileURL
    }
}
