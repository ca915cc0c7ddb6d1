import CacheCore
@testable import CacheStore
import Cryptography
import Foundation
import Testing

/// AES-256-GCM sealing and master key files: what opens, and that nothing else does.
@Suite struct SealingTests {
    @Test func sealedBytesOpenOnlyWithTheirKeyAndContext() throws {
        let key = Bytes.random(count: 32), other = Bytes.random(count: 32)
        for plaintext in [[], Array("x".utf8), Bytes.random(count: 70_000)] {
            let sealed = try AESGCM.seal(plaintext, key: key, aad: Array("here".utf8))
            #expect(sealed.count == plaintext.count + AESGCM.overhead)
            #expect(AESGCM.open(sealed, key: key, aad: Array("here".utf8)) == plaintext)
            #expect(AESGCM.open(sealed, key: other, aad: Array("here".utf8)) == nil)
            #expect(AESGCM.open(sealed, key: key, aad: Array("there".utf8)) == nil)
            #expect(AESGCM.open(Array(sealed.dropLast()), key: key, aad: Array("here".utf8)) == nil)
            // Every byte matters: nonce, ciphertext and tag.
            for index in Set([0, 11, 12, sealed.count / 2, sealed.count - 1]) where index < sealed.count {
                var flipped = sealed
                flipped[index] ^= 0x01
                #expect(AESGCM.open(flipped, key: key, aad: Array("here".utf8)) == nil, "byte \(index)")
            }
        }
        // Two seals of one plaintext differ (a fresh nonce each time).
        #expect(try AESGCM.seal([1, 2, 3], key: key, aad: []) != AESGCM.seal([1, 2, 3], key: key, aad: []))
        // A key of the wrong size is refused, not a trap.
        for size in [0, 16, 31, 33] {
            #expect(throws: CryptoFailure.self) { try AESGCM.seal([1], key: Bytes.random(count: size), aad: []) }
        }
    }

    /// Total on any input: random bytes of any length never open and never trap.
    @Test func openingArbitraryBytesIsTotal() {
        let key = Bytes.random(count: 32)
        for length in 0..<200 {
            #expect(AESGCM.open(Bytes.random(count: length), key: key, aad: []) == nil)
        }
        #expect(AESGCM.open([UInt8](repeating: 0, count: 64), key: [1, 2, 3], aad: []) == nil)
    }

    /// RFC 5869 test case 1.
    @Test func hkdfMatchesTheRFC() throws {
        let okm = try HKDF.sha256(secret: [UInt8](repeating: 0x0b, count: 22), salt: Array(0x00...0x0c),
                              info: Array(0xf0...0xf9), count: 42)
        #expect(Bytes.hex(okm) == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    }

    @Test func masterKeyFiles() throws {
        let line = MasterKeys.generateLine()
        #expect(line.utf8.count == 64)
        let base64 = Data(Bytes.random(count: 32)).base64EncodedString()
        let keys = try MasterKeys.parse("# rotated 2026-12\n\(line)  # new\n\n\(base64)\n")
        #expect(keys.keys.count == 2)
        #expect(keys.key(id: keys.sealing.id) != nil && keys.keys[0].id != keys.keys[1].id)
        #expect(try MasterKeys.parse(line).sealing.id == keys.sealing.id)
        for bad in ["", "# only a comment", String(line.dropLast()), line + "0", "zz" + line.dropFirst(2),
                    Data(Bytes.random(count: 16)).base64EncodedString()] {
            #expect(throws: MasterKeys.Failure.self) { try MasterKeys.parse(bad) }
        }
        #expect(throws: MasterKeys.Failure.unreadable("/nonexistent/key")) { try MasterKeys.load(path: "/nonexistent/key") }
    }
}
