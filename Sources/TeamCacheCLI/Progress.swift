import Foundation

/// A line on standard error once a second (entries, bytes, rate, and ETA when the total is
/// known), and a last one at the end.
struct Progress {
    let verb: String
    let unit: String
    var total: Int?
    private(set) var entries = 0
    private(set) var bytes = 0
    private let started = Date()
    private var lastShown = Date()

    init(verb: String, unit: String = "entries", total: Int? = nil) {
        self.verb = verb
        self.unit = unit
        self.total = total
    }

    mutating func count(entries: Int, bytes: Int, done: Int? = nil) {
        self.entries += entries
        self.bytes += bytes
        guard Date().timeIntervalSince(lastShown) >= 1 else { return }
        lastShown = Date()
        show(done: done)
    }

    func show(done: Int? = nil, extra: String = "") {
        let seconds = max(Date().timeIntervalSince(started), 0.001)
        var line = "\(verb) \(entries) \(unit), \(String(format: "%.1f", Double(bytes) / 1e6)) MB, "
            + "\(Int(Double(entries) / seconds)) \(unit)/s"
        if let total, let done, done > 0, total > done {
            line += ", ETA \(Int(seconds * Double(total - done) / Double(done))) s"
        }
        printError(line + extra)
    }

    func finish(extra: String = "") { show(extra: extra) }
}
