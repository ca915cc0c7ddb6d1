// swift-tools-version:6.0
import PackageDescription

// Layering (lower never imports higher):
//   Locking → C wrappers, Cryptography, Observability → Postgres, HTTPServer, HTTPClient, CacheCore
//   → CacheStore (CacheCore on PostgreSQL) → TeamCache
//   → TeamCacheCLI (the `teamcache` executable)
let package = Package(
    name: "TeamCache",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .executable(name: "teamcache", targets: ["TeamCacheCLI"]),
        .library(name: "TeamCacheClient", targets: ["TeamCacheClient"]),
    ],
    targets: [
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLinux"),
        .systemLibrary(name: "CSSL", pkgConfig: "libssl", providers: [.apt(["libssl-dev"])]),
        // The client's local tier file (`LocalTier(path:)`).
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        // State reachable only inside its lock, and one-value hand-offs between threads.
        .target(name: "Locking"),
        // SHA-256, AES-GCM and HKDF through OpenSSL, and byte helpers.
        .target(name: "Cryptography", dependencies: ["CCrypto"]),
        // The one JSON string escaper (canonical: descriptor keys hash its output).
        .target(name: "JSONEscaping"),
        .target(name: "Observability", dependencies: ["JSONEscaping", "Locking"]),
        .target(name: "Postgres", dependencies: ["CLibPQ", "CLinux", "Cryptography", "Locking", "Observability"]),
        .target(name: "HTTPServer", dependencies: ["CLinux", "JSONEscaping", "Locking", "Observability"]),
        // Outgoing HTTP/1.1 (and TLS) calls driven by any `Reactor`'s loop: the gateway's upstreams.
        .target(name: "HTTPClient", dependencies: ["CSSL", "Locking"]),
        // Descriptor keys and canonical JSON: shared by the server and the client library.
        // On Apple platforms it hashes with CryptoKit: the client library needs no OpenSSL there.
        .target(name: "CacheKeys", dependencies: ["JSONEscaping", .target(name: "Cryptography", condition: .when(platforms: [
            .linux, .android, .windows, .wasi, .openbsd,
        ]))]),
        // The cache's domain: entries and freshness, policy, names, the near-cache, recent
        // changes, held leases, gzip, the dump format, feed changes. No database here.
        .target(name: "CacheCore", dependencies: ["CZlib", "CacheKeys", "Cryptography", "JSONEscaping", "Locking", "Observability"]),
        // The domain stored in PostgreSQL: the entry store and its batchers, the group write,
        // eviction, leases, access tracking, the keyring and sealing, import.
        .target(name: "CacheStore", dependencies: ["CacheCore", "CacheKeys", "Cryptography", "Locking", "Observability",
                                                   "Postgres"]),
        .target(name: "TeamCache", dependencies: ["CacheCore", "CacheStore", "CacheKeys", "HTTPServer", "HTTPClient",
                                                  "Postgres", "Cryptography", "Locking", "Observability"]),
        // The command line (`teamcache serve`, `migrate`, `tokens`, …). Not named `teamcache`:
        // that differs from `TeamCache` only in case, and macOS's default file system folds it.
        .executableTarget(name: "TeamCacheCLI", dependencies: ["TeamCache"]),
        // libFuzzer target for the HTTP parser (see scripts/fuzz.sh).
        // The libFuzzer entry point of the fuzz targets (or a replay of files without it).
        .target(name: "FuzzSupport"),
        .executableTarget(name: "HTTPParserFuzz", dependencies: ["FuzzSupport", "HTTPServer"]),
        // libFuzzer target for the whole request path: parse, route, headers, query, JSON, handlers.
        // libFuzzer target for the HTTP client's response parser.
        .executableTarget(name: "ResponseParserFuzz", dependencies: ["FuzzSupport", "HTTPClient"]),
        .executableTarget(name: "RequestFuzz", dependencies: ["FuzzSupport", "HTTPServer", "TeamCache"]),
        .target(name: "TeamCacheClient", dependencies: ["CacheKeys", "CSQLite", "Locking"]),
        // Heap allocations per near-cache hit, counted by the allocator's entry points defined in
        // this executable (CAllocationCount): scripts/hit-allocations.sh runs it (release build)
        // and CI holds it under a ceiling.
        .target(name: "CAllocationCount"),
        .executableTarget(name: "HitAllocations", dependencies: ["CAllocationCount", "TeamCache", "TestSupport"]),
        .target(name: "TestSupport", dependencies: ["Locking", "Postgres", "TeamCache", "HTTPServer"],
                path: "Sources/TestSupport"),

        // One test target per module, lowest first.
        .testTarget(name: "LockingTests", dependencies: ["Locking"]),
        .testTarget(name: "ObservabilityTests", dependencies: ["Locking", "Observability"]),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "Locking", "TestSupport"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "Locking", "Observability", "TestSupport"]),
        .testTarget(name: "HTTPClientTests", dependencies: ["HTTPClient", "HTTPServer", "Locking", "TestSupport"]),
        // The domain's tests: no database, no server.
        .testTarget(name: "CacheCoreTests", dependencies: ["CacheCore", "CLinux", "Locking", "CacheKeys"]),
        .testTarget(name: "CacheKeysTests", dependencies: ["CacheKeys"]),
        .testTarget(name: "JSONEscapingTests", dependencies: ["JSONEscaping"]),
        .testTarget(name: "CacheStoreTests", dependencies: ["CacheStore", "CacheCore", "Locking", "Postgres", "TestSupport"]),
        .testTarget(name: "IntegrationTests", dependencies: ["TeamCache", "Locking", "TeamCacheClient", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
