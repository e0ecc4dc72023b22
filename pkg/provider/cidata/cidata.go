// Package cidata builds the NoCloud seed image that carries a claim's
// rendered user data to a machine: an ISO 9660 filesystem labelled cidata
// with the files user-data and meta-data, which cloud-init's NoCloud
// datasource finds on any attached drive (a Proxmox CD-ROM, a BMC's
// virtual media). The image holds the claim's join token: callers never
// log it.
package cidata

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// Label is the volume label cloud-init looks for.
const Label = "cidata"

// MetaData is the meta-data file of a seed: the instance ID (a new one
// makes cloud-init run again, as a new claim on a reused machine must)
// and the hostname.
func MetaData(instanceID, hostname string) string {
	return fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", instanceID, hostname)
}

// NoCloud builds a seed image: ISO 9660 with Rock Ridge names (so the
// lower-case names survive every reader), volume label cidata, files
// user-data and meta-data. go-diskfs stages the files in a private
// temporary directory, which is removed before return.
func NoCloud(userData []byte, metaData string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "claimscale-cidata-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	img, err := os.OpenFile(dir+"/seed.iso", os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = img.Close() }()
	workspace := dir + "/workspace"
	if err := os.Mkdir(workspace, 0o700); err != nil {
		return nil, err
	}
	fs, err := iso9660.Create(file.New(img, false), 0, 0, 2048, workspace)
	if err != nil {
		return nil, err
	}
	for name, content := range map[string][]byte{"/user-data": userData, "/meta-data": []byte(metaData)} {
		f, err := fs.OpenFile(name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return nil, err
		}
		if _, err := f.Write(content); err != nil {
			return nil, err
		}
	}
	if err := fs.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: Label}); err != nil {
		return nil, err
	}
	if _, err := img.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	image, err := io.ReadAll(img)
	if err != nil {
		return nil, err
	}
	// ISO 9660 pads identifiers with spaces; go-diskfs pads the volume
	// identifier (primary volume descriptor, sector 16, bytes 40-71) with
	// NULs, which some readers keep in the label.
	const volumeID = 16*2048 + 40
	if len(image) >= volumeID+32 {
		for i := volumeID + len(Label); i < volumeID+32; i++ {
			if image[i] == 0 {
				image[i] = ' '
			}
		}
	}
	return image, nil
}

// Read returns the label and the files of the root directory of an ISO
// 9660 image: what a machine booting with it would find. Tests and the
// fake BMC read seeds with it.
func Read(image []byte) (label string, files map[string][]byte, err error) {
	dir, err := os.MkdirTemp("", "claimscale-cidata-read-")
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	f, err := os.CreateTemp(dir, "seed-*.iso")
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Write(image); err != nil {
		return "", nil, err
	}
	fs, err := iso9660.Read(file.New(f, true), int64(len(image)), 0, 2048)
	if err != nil {
		return "", nil, fmt.Errorf("reading the ISO: %w", err)
	}
	entries, err := fs.ReadDir("/")
	if err != nil {
		return "", nil, fmt.Errorf("reading the ISO's root directory: %w", err)
	}
	files = map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		r, err := fs.OpenFile("/"+e.Name(), os.O_RDONLY)
		if err != nil {
			return "", nil, fmt.Errorf("opening %s on the ISO: %w", e.Name(), err)
		}
		content, err := io.ReadAll(r)
		if err != nil {
			return "", nil, fmt.Errorf("reading %s on the ISO: %w", e.Name(), err)
		}
		files[e.Name()] = content
	}
	return strings.TrimRight(fs.Label(), " "), files, nil
}
