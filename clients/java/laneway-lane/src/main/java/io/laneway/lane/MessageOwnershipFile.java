package io.laneway.lane;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.logging.Level;


/**
 * The ownership document in a file (a mounted ConfigMap key, or any file kept current), read
 * again when its modification time or size changes, looked at at most once a second. A missing
 * file is no document (baseline owns everything); one that cannot be parsed leaves the last good
 * document in force.
 */
public final class MessageOwnershipFile implements Supplier<MessageOwnership> {
    private static final long CHECK_NANOS = TimeUnit.SECONDS.toNanos(1);

    private final Path file;
    private volatile MessageOwnership current = MessageOwnership.BASELINE;
    private FileTime modified;
    private long size = -1;
    private long nextCheck;
    private boolean warned;

    public MessageOwnershipFile(Path file) {
        this.file = file;
        check(System.nanoTime());
    }

    @Override
    public MessageOwnership get() {
        long now = System.nanoTime();
        if (now - nextCheck >= 0) {
            check(now);
        }
        return current;
    }

    private synchronized void check(long now) {
        nextCheck = now + CHECK_NANOS;
        try {
            FileTime time = Files.getLastModifiedTime(file);
            long length = Files.size(file);
            if (time.equals(modified) && length == size) {
                return;
            }
            String text = new String(Files.readAllBytes(file), StandardCharsets.UTF_8);
            current = MessageOwnership.parse(text);
            modified = time;
            size = length;
        } catch (NoSuchFileException e) {
            current = MessageOwnership.BASELINE;
            modified = null;
            size = -1;
        } catch (IOException | RuntimeException e) {
            if (!warned) {
                warned = true;
                Lane.LOG.log(Level.WARNING,
                        "laneway: cannot read " + file + "; keeping the previous message ownership: " + e);
            }
        }
    }
}
