// swift-tools-version:6.0
import PackageDescription

// Layering (lower never imports higher):
//   C wrappers → Hashing, Observability → Postgres, HTTPServer, CacheCore → TeamCache → teamcache
let package = Package(
    name: "TeamCache",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .executable(name: "teamcache", targets: ["teamcache"]),
        .library(name: "TeamCacheClient", targets: ["TeamCacheClient"]),
    ],
    targets: [
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLinux"),

        .target(name: "Hashing", dependencies: ["CCrypto"]),
        .target(name: "Observability"),
        .target(name: "Postgres", dependencies: ["CLibPQ", "Hashing", "Observability"]),
        .target(name: "HTTPServer", dependencies: ["CLinux", "Observability"]),
        // Descriptor keys and canonical JSON: shared by the server and the client library.
        // On Apple platforms it hashes with CryptoKit: the client library needs no OpenSSL there.
        .target(name: "CacheKeys", dependencies: [.target(name: "Hashing", condition: .when(platforms: [
            .linux, .android, .windows, .wasi, .openbsd,
        ]))]),
        .target(name: "CacheCore", dependencies: ["CZlib", "CacheKeys", "Hashing", "Observability", "Postgres"]),
        .target(name: "TeamCache", dependencies: ["CacheCore", "CacheKeys", "HTTPServer", "Postgres", "Hashing",
                                                  "Observability"]),
        .executableTarget(name: "teamcache", dependencies: ["TeamCache"]),
        // libFuzzer target for the HTTP parser (see scripts/fuzz.sh).
        // The libFuzzer entry point of the fuzz targets (or a replay of files without it).
        .target(name: "FuzzSupport"),
        .executableTarget(name: "HTTPParserFuzz", dependencies: ["FuzzSupport", "HTTPServer"]),
        // libFuzzer target for the whole request path: parse, route, headers, query, JSON, handlers.
        .executableTarget(name: "RequestFuzz", dependencies: ["FuzzSupport", "HTTPServer", "TeamCache"]),
        .target(name: "TeamCacheClient", dependencies: ["CacheKeys"]),
        .target(name: "TestSupport", dependencies: ["Postgres", "TeamCache", "HTTPServer"], path: "Sources/TestSupport"),

        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "TestSupport"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "Observability", "TestSupport"]),
        .testTarget(name: "CacheCoreTests", dependencies: ["CacheCore", "CacheKeys", "TestSupport"]),
        .testTarget(name: "IntegrationTests", dependencies: ["TeamCache", "TeamCacheClient", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
