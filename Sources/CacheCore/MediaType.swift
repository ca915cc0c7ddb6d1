/// What a stored content type may be, wherever it comes from (a PUT's header, a dump line, a
/// descriptor's `metadata.content_type`): it goes into the head of every hit, so a CR or LF in
/// it would split that head and let one writer add headers, or a whole response, to another
/// caller's answer.
public enum MediaType {
    /// A media type (with a `/`) of 1 to 256 bytes, with no control character but a tab.
    public static func isStorable(_ text: String) -> Bool {
        (1...256).contains(text.utf8.count) && text.utf8.contains(UInt8(ascii: "/"))
            && text.utf8.allSatisfy { ($0 >= 0x20 && $0 != 0x7F) || $0 == 0x09 }
    }
}
