/// A configuration value that cannot be used, naming the variable and what it accepts.
public struct ConfigurationError: Error, CustomStringConvertible, Equatable {
    public let variable: String
    public let value: String
    public let allowed: String

    public var description: String {
        let flag = Setting.all.first(where: { $0.variable == variable })?.flag.map { " (\($0))" } ?? ""
        return "\(variable)\(flag)=\"\(value)\" is not valid: expected \(allowed)"
    }
}
