package io.laneway.lane;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class OwnLaneTest {
    @TempDir
    Path dir;

    @AfterEach
    void clean() {
        System.clearProperty(OwnLane.LABELS_FILE_PROPERTY);
        System.clearProperty(OwnLane.LABEL_PROPERTY);
        System.clearProperty(OwnLane.REFRESH_PROPERTY);
        OwnLane.configure(null, null);
    }

    /** Lays the file out as the kubelet does: labels -> ..data/labels, ..data -> a timestamped dir. */
    private Path kubeletVolume(String content) throws Exception {
        Path volume = Files.createDirectories(dir.resolve("podinfo"));
        writeGeneration(volume, "..2024_01_01_00_00_00.1", content);
        Files.createSymbolicLink(volume.resolve("labels"), Path.of("..data/labels"));
        return volume.resolve("labels");
    }

    // a new generation directory, then an atomic rename of a fresh ..data symlink over the old one
    private static void writeGeneration(Path volume, String generation, String content) throws Exception {
        Path gen = Files.createDirectories(volume.resolve(generation));
        Files.writeString(gen.resolve("labels"), content);
        Path tmp = volume.resolve("..data_tmp");
        Files.deleteIfExists(tmp);
        Files.createSymbolicLink(tmp, Path.of(generation));
        Files.move(tmp, volume.resolve("..data"), StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }

    @Test
    void readsTheLaneLabelFromADownwardApiFile() throws Exception {
        Path labels = kubeletVolume("app=\"shop\"\nlaneway.io/lane=\"dev-alice\"\npod-template-hash=\"5d9c\"");
        assertEquals("dev-alice", OwnLane.configure(labels, null));
        assertEquals("dev-alice", OwnLane.get());
    }

    @Test
    void picksUpARelabelWhenTheKubeletSwapsTheDataSymlink() throws Exception {
        Path labels = kubeletVolume("laneway.io/lane=\"dev-alice\"\n");
        System.setProperty(OwnLane.REFRESH_PROPERTY, "60000");
        assertEquals("dev-alice", OwnLane.configure(labels, null));
        writeGeneration(labels.getParent(), "..2024_01_01_00_00_05.2", "laneway.io/lane=\"gray\"\n");
        assertEquals("dev-alice", OwnLane.get(), "cached within the refresh period");
        assertEquals("gray", OwnLane.reload());
        assertEquals("gray", OwnLane.get());
        writeGeneration(labels.getParent(), "..2024_01_01_00_00_09.3", "app=\"shop\"\n");
        assertNull(OwnLane.reload(), "label removed: baseline");
    }

    @Test
    void rereadsTheFileOnceTheRefreshPeriodHasPassed() throws Exception {
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "laneway.io/lane=\"dev-alice\"\n");
        System.setProperty(OwnLane.REFRESH_PROPERTY, "50");
        assertEquals("dev-alice", OwnLane.configure(labels, null));
        Files.writeString(labels, "laneway.io/lane=\"gray\"\n");
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (!"gray".equals(OwnLane.get()) && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertEquals("gray", OwnLane.get());
    }

    @Test
    void aMissingOrUnreadableFileMeansNoLane() throws Exception {
        assertNull(OwnLane.configure(dir.resolve("absent"), null));
        assertNull(OwnLane.get());
        assertNull(OwnLane.configure(dir, null), "a directory is not a labels file");
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "laneway.io/lane=\"gray\"\n");
        assertEquals("gray", OwnLane.configure(labels, null));
        Files.delete(labels);
        assertNull(OwnLane.reload());
    }

    @Test
    void noLabelAnEmptyOneOrAnInvalidOneMeansNoLane() throws Exception {
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "app=\"shop\"\n");
        assertNull(OwnLane.configure(labels, null));
        Files.writeString(labels, "laneway.io/lane=\"\"\n");
        assertNull(OwnLane.reload());
        Files.writeString(labels, "laneway.io/lane=\"not a lane\"\n");
        assertNull(OwnLane.reload());
        Files.writeString(labels, "laneway.io/lane=gray\n");
        assertNull(OwnLane.reload(), "unquoted: not the downward-API format");
        Files.writeString(labels, "xlaneway.io/lane=\"gray\"\nlaneway.io/lanes=\"x\"\n");
        assertNull(OwnLane.reload(), "only the exact key counts");
    }

    @Test
    void unquotesGoQuotedValues() throws Exception {
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "note=\"a \\\"quoted\\\" \\\\ value\\n\"\r\nlaneway.io/lane=\"dev\\x2dalice\"\r\n");
        assertEquals("dev-alice", OwnLane.configure(labels, null));
    }

    @Test
    void theFileAndLabelComeFromSystemProperties() throws Exception {
        Path labels = dir.resolve("my-labels");
        Files.writeString(labels, "laneway.io/lane=\"gray\"\nteam.example/lane=\"dev-bob\"\n");
        System.setProperty(OwnLane.LABELS_FILE_PROPERTY, labels.toString());
        assertEquals("gray", OwnLane.configure(null, null));
        assertEquals(labels, OwnLane.labelsFile());
        System.setProperty(OwnLane.LABEL_PROPERTY, "team.example/lane");
        assertEquals("dev-bob", OwnLane.reload());
        assertEquals("team.example/lane", OwnLane.labelKey());
    }

    @Test
    void defaultsAreThePodinfoVolumeAndTheLanewayLabel() {
        assertEquals(Path.of("/etc/podinfo/labels"), OwnLane.labelsFile());
        assertEquals("laneway.io/lane", OwnLane.labelKey());
    }
}
