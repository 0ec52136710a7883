package io.laneway.lane;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.logging.Level;

/**
 * This instance's own lane: the {@code laneway.io/lane} label of its pod, read from a Kubernetes
 * downward-API labels file.
 *
 * <p>A file rather than an environment variable because the kubelet rewrites the file when the
 * pod is relabelled (it swaps a {@code ..data} symlink), while an environment variable keeps the
 * value the container started with. The value is cached and the file read again at most once per
 * refresh period, so {@link #get()} costs a clock read on the hot path.
 *
 * <p>Where the file is: system property {@value #LABELS_FILE_PROPERTY}, else environment variable
 * {@code LANEWAY_LABELS_FILE}, else {@value #DEFAULT_LABELS_FILE}. Which label: {@value
 * #LABEL_PROPERTY} / {@code LANEWAY_LANE_LABEL}, else {@value #DEFAULT_LABEL}. Refresh period in
 * milliseconds: {@value #REFRESH_PROPERTY} / {@code LANEWAY_LABELS_REFRESH_MS}, else 1000. These
 * are looked up again at every refresh, so a property set after start-up is seen.
 */
public final class OwnLane {
    public static final String DEFAULT_LABELS_FILE = "/etc/podinfo/labels";
    public static final String DEFAULT_LABEL = "laneway.io/lane";
    public static final long DEFAULT_REFRESH_MS = 1000;

    public static final String LABELS_FILE_PROPERTY = "laneway.labels.file";
    public static final String LABEL_PROPERTY = "laneway.lane.label";
    public static final String REFRESH_PROPERTY = "laneway.labels.refresh.ms";

    private static final String LABELS_FILE_ENV = "LANEWAY_LABELS_FILE";
    private static final String LABEL_ENV = "LANEWAY_LANE_LABEL";
    private static final String REFRESH_ENV = "LANEWAY_LABELS_REFRESH_MS";

    // far larger than any labels file (the API server caps all labels of an object at 256 KiB)
    private static final long MAX_FILE_BYTES = 1 << 20;

    private static final AtomicBoolean RELOADING = new AtomicBoolean();
    private static final AtomicBoolean TOLD_UNREADABLE = new AtomicBoolean();
    private static final AtomicBoolean TOLD_INVALID = new AtomicBoolean();

    private static volatile Path overrideFile;
    private static volatile String overrideLabel;

    private static volatile String value;
    private static volatile long nextReload;

    static {
        load(System.nanoTime());
    }

    private OwnLane() {}

    /** This instance's lane, or {@code null} (baseline, or no labels file). Never throws. */
    public static String get() {
        long now = System.nanoTime();
        if (now - nextReload >= 0 && RELOADING.compareAndSet(false, true)) {
            try {
                load(now);
            } finally {
                RELOADING.set(false);
            }
        }
        return value;
    }

    /** Reads the labels file now, whatever the refresh period, and returns the lane found. */
    public static String reload() {
        synchronized (OwnLane.class) {
            load(System.nanoTime());
            return value;
        }
    }

    /**
     * Reads labels from {@code labelsFile} and the lane from label {@code labelKey} from now on,
     * and reloads; {@code null} for either goes back to the system property, environment
     * variable or default. For tests, and for programs that know their labels file best.
     */
    public static String configure(Path labelsFile, String labelKey) {
        synchronized (OwnLane.class) {
            overrideFile = labelsFile;
            overrideLabel = labelKey;
            return reload();
        }
    }

    /** The labels file read at the latest reload. */
    public static Path labelsFile() {
        Path file = overrideFile;
        return file != null ? file : Paths.get(setting(LABELS_FILE_PROPERTY, LABELS_FILE_ENV, DEFAULT_LABELS_FILE));
    }

    /** The label whose value is the lane. */
    public static String labelKey() {
        String label = overrideLabel;
        return label != null ? label : setting(LABEL_PROPERTY, LABEL_ENV, DEFAULT_LABEL);
    }

    private static void load(long now) {
        Path file;
        String label;
        long refreshNanos;
        try {
            file = labelsFile();
            label = labelKey();
            refreshNanos = TimeUnit.MILLISECONDS.toNanos(refreshMillis());
        } catch (RuntimeException e) {
            // an unusable path in a property, or a security manager refusing to tell
            tellOnce(TOLD_UNREADABLE, Level.WARNING, "laneway: no own lane: bad labels-file setting: " + e);
            value = null;
            nextReload = now + TimeUnit.MILLISECONDS.toNanos(DEFAULT_REFRESH_MS);
            return;
        }
        value = read(file, label);
        nextReload = now + refreshNanos;
    }

    private static String read(Path file, String label) {
        String text;
        try {
            if (Files.size(file) > MAX_FILE_BYTES) {
                tellOnce(TOLD_UNREADABLE, Level.WARNING, "laneway: no own lane: " + file + " is too large");
                return null;
            }
            text = new String(Files.readAllBytes(file), StandardCharsets.UTF_8);
        } catch (NoSuchFileException e) {
            tellOnce(TOLD_UNREADABLE, Level.INFO, "laneway: no own lane: " + file
                    + " does not exist (mount the pod's labels with the downward API to give this instance a lane)");
            return null;
        } catch (IOException | RuntimeException e) {
            tellOnce(TOLD_UNREADABLE, Level.WARNING, "laneway: no own lane: cannot read " + file + ": " + e);
            return null;
        }
        String raw = DownwardApi.labelValue(text, label);
        if (raw == null || raw.isEmpty()) {
            return null;
        }
        if (!Lane.isValid(raw)) {
            tellOnce(TOLD_INVALID, Level.WARNING, "laneway: ignoring label " + label + " in " + file
                    + ": not a valid lane");
            return null;
        }
        return raw;
    }

    private static long refreshMillis() {
        String text = setting(REFRESH_PROPERTY, REFRESH_ENV, null);
        if (text == null) {
            return DEFAULT_REFRESH_MS;
        }
        try {
            long ms = Long.parseLong(text.trim());
            return ms >= 0 ? ms : DEFAULT_REFRESH_MS;
        } catch (NumberFormatException e) {
            return DEFAULT_REFRESH_MS;
        }
    }

    private static String setting(String property, String env, String fallback) {
        String v = System.getProperty(property);
        if (v == null || v.isEmpty()) {
            v = System.getenv(env);
        }
        return v == null || v.isEmpty() ? fallback : v;
    }

    private static void tellOnce(AtomicBoolean told, Level level, String message) {
        if (told.compareAndSet(false, true)) {
            Lane.LOG.log(level, message);
        }
    }
}
