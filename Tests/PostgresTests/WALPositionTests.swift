import Foundation
import Postgres
import Testing

@Suite struct WALPositionTests {
    @Test func parsesAndWritesPostgreSQLsForm() {
        #expect(WALPosition("16/B374D848")?.value == 0x16_B374_D848)
        #expect(WALPosition("0/0")?.value == 0)
        #expect(WALPosition("FFFFFFFF/FFFFFFFF")?.value == UInt64.max)
        #expect(WALPosition("16/b374d848")?.description == "16/B374D848")
        #expect(WALPosition("0/3000060")! < WALPosition("1/0")!)
        for bad in ["", "/", "1/", "/1", "1/2/3", "123456789/0", "0/123456789", "g/0", "-1/0", " 1/0", "1 /0",
                    "１/0", "0x1/0", "1/0\u{0}"] {
            #expect(WALPosition(bad) == nil, "\(bad) was accepted")
        }
    }

    /// Total over any bytes: random strings from the position's own alphabet and beyond.
    @Test func anyTextParsesOrIsRefusedWithoutTrapping() {
        let alphabet = Array("0123456789abcdefABCDEFxX/ -\u{0}é")
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let text = String((0..<Int.random(in: 0...20, using: &generator)).map { _ in
                alphabet.randomElement(using: &generator)!
            })
            if let position = WALPosition(text) { #expect(WALPosition(position.description) == position) }
        }
    }

    /// A standby is current as of the last time the primary stood at or before what it replayed.
    @Test func historyBoundsAStandbysStaleness() {
        let history = WALHistory(capacity: 4, currentFor: 1)
        let second: UInt64 = 1_000_000_000
        #expect(history.currentAsOf(replayed: WALPosition(100), now: second) == nil)
        history.record(WALPosition(100), at: 1 * second)
        history.record(WALPosition(200), at: 2 * second)
        history.record(WALPosition(200), at: 3 * second)
        // Caught up: current as of the newest sample, even though nothing was written.
        #expect(history.currentAsOf(replayed: WALPosition(200), now: 3 * second) == 3 * second)
        #expect(history.currentAsOf(replayed: WALPosition(150), now: 3 * second) == 1 * second)
        #expect(history.currentAsOf(replayed: WALPosition(50), now: 3 * second) == nil)
        // The ring keeps the newest: the sample at 1 s falls out.
        history.record(WALPosition(300), at: 4 * second)
        history.record(WALPosition(400), at: 5 * second)
        #expect(history.currentAsOf(replayed: WALPosition(150), now: 5 * second) == nil)
        #expect(history.currentAsOf(replayed: WALPosition(350), now: 5 * second) == 4 * second)
        // No sample for over a second: the primary is not being watched, nothing is known.
        #expect(history.currentAsOf(replayed: WALPosition(400), now: 7 * second) == nil)
    }
}
