@testable import HTTPServer
import Testing

/// The word-at-a-time checks answer exactly as a test of each byte does.
@Suite struct ByteClassesTests {
    private func fieldValue(_ byte: UInt8) -> Bool { !((byte < 32 && byte != 9) || byte == 127) }
    private func target(_ byte: UInt8) -> Bool { byte > 32 && byte < 127 }

    /// Every byte value at every position of ranges of 0-24 bytes at every offset, amid
    /// bytes that pass: one failing byte is found wherever it sits in a word or the tail.
    @Test func everyByteValueAtEveryPosition() {
        for length in 0...24 {
            for offset in 0..<3 {
                var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: length + offset + 2)
                let range = offset..<offset + length
                for position in range {
                    for value in 0...255 {
                        bytes[position] = UInt8(value)
                        bytes.withUnsafeBufferPointer { buffer in
                            #expect(ByteClasses.isFieldValue(buffer, range) == fieldValue(UInt8(value)))
                            #expect(ByteClasses.isTarget(buffer, range) == target(UInt8(value)))
                        }
                    }
                    bytes[position] = UInt8(ascii: "a")
                }
                // Failing bytes outside the range are not looked at.
                if offset > 0 { bytes[offset - 1] = 0 }
                bytes[offset + length] = 127
                bytes.withUnsafeBufferPointer { buffer in
                    #expect(ByteClasses.isFieldValue(buffer, range) && ByteClasses.isTarget(buffer, range))
                }
            }
        }
    }

    /// Random words of bytes near the limits (where a borrow could mark a byte falsely).
    @Test func randomBytesNearTheLimits() {
        var generator = SystemRandomNumberGenerator()
        let near: [UInt8] = [0, 1, 8, 9, 10, 31, 32, 33, 126, 127, 128, 129, 0x9F, 0xA0, 0xFF]
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 0...20, using: &generator)).map { _ in
                Bool.random(using: &generator) ? near.randomElement(using: &generator)!
                    : UInt8.random(in: 0...255, using: &generator)
            }
            bytes.withUnsafeBufferPointer { buffer in
                #expect(ByteClasses.isFieldValue(buffer, 0..<bytes.count) == bytes.allSatisfy(fieldValue), "\(bytes)")
                #expect(ByteClasses.isTarget(buffer, 0..<bytes.count) == bytes.allSatisfy(target), "\(bytes)")
            }
        }
    }

    /// A range reaching outside the bytes is refused, never read: past the end, before the
    /// start, over an empty buffer.
    @Test func rangesOutsideTheBytesDoNotPass() {
        let bytes = Array("abcdefghijklmnop".utf8)
        bytes.withUnsafeBufferPointer { buffer in
            for range in [0..<17, 10..<40, -1..<4, 16..<17, -8..<0] {
                #expect(!ByteClasses.isFieldValue(buffer, range) && !ByteClasses.isTarget(buffer, range), "\(range)")
            }
            #expect(ByteClasses.isFieldValue(buffer, 0..<16) && ByteClasses.isTarget(buffer, 16..<16))
        }
        let empty = UnsafeBufferPointer<UInt8>(start: nil, count: 0)
        #expect(ByteClasses.isFieldValue(empty, 0..<0) && !ByteClasses.isFieldValue(empty, 0..<1))
    }
}
